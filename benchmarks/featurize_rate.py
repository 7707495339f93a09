"""Featurized programs per second, by reader and process count, side by side.

A device folder's first ``--max-records`` measured tuning records are read and featurized
(with ``PerStoreFeature`` rows) once per reader and ``--workers`` setting, in one run, so
that the rates compare on the same machine:

- ``tvm``: every record parsed into a ``TuningRecord`` (:func:`cdmpp.dataset.load_device_dir`),
  then :func:`cdmpp.featurize.parallel.featurize_records`;
- ``json``: the records read as plain JSON, each trace replayed once where it is featurized
  (:func:`cdmpp.featurize.parallel.featurize_record_lines`), as ``cdmpp train`` featurizes
  an uncached folder (:func:`cdmpp.featurize.folder.featurize_folder`).

Each row's seconds are reading plus featurizing.  Nothing is cached.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks import write_result
from cdmpp import dataset as ds
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.featurize.folder import measured_record_lines
from cdmpp.featurize.parallel import CHUNK, featurize_record_lines, featurize_records
from cdmpp.records import read_workload_lines

READERS = ("tvm", "json")


def featurize_rates(device_dir: Path, workers: list[int], max_records: int) -> dict:
    """Read and featurize the folder's first ``max_records`` programs once per reader
    (:data:`READERS`) and entry of ``workers``.

    Returns:
        ``{"device", "folder", "programs", "rows": [{"reader", "workers", "read_s",
        "featurize_s", "seconds", "programs_per_s"}, ...]}``; ``device`` is this machine's
        device id (where the timings ran), seconds are wall seconds (``seconds``: reading
        plus featurizing).

    Raises:
        InputError: an empty or non-positive ``workers`` entry, ``max_records`` below 1.
        DatasetError: not a device folder.
    """

    if not workers or min(workers) < 1 or max_records < 1:
        raise InputError(f"workers must be >= 1 and max_records >= 1, got {workers} and {max_records}")
    device_dir = Path(device_dir)
    target = ds.read_manifest(device_dir).get("device", {}).get("target")
    result = {"device": local_cpu().device_id, "folder": str(device_dir), "rows": []}
    for reader in READERS:
        for w in workers:
            t0 = time.perf_counter()
            if reader == "tvm":
                db = ds.load_device_dir(device_dir, max_records=max_records)
                records = [p.record for p in db.programs]
                read_s = time.perf_counter() - t0
                featurize_records(records, target or records[0].target, psf=True, workers=w, pool_from=0,
                                  chunk=_chunk(len(records), w))
            else:
                wl, rec = ds.database_files(device_dir)
                lines = [obj for _, _, obj in read_workload_lines(wl, [])]
                records = []
                for widx, _, record in measured_record_lines(rec, len(lines)):
                    records.append((widx, record))
                    if len(records) >= max_records:
                        break
                read_s = time.perf_counter() - t0
                featurize_record_lines(lines, records, target, psf=True, workers=w, pool_from=0,
                                       chunk=_chunk(len(records), w))
            secs = time.perf_counter() - t0
            result["programs"] = len(records)
            result["rows"].append({"reader": reader, "workers": w, "read_s": round(read_s, 1),
                                   "featurize_s": round(secs - read_s, 1), "seconds": round(secs, 1),
                                   "programs_per_s": round(len(records) / secs, 1)})
            print(result["rows"][-1], flush=True)
    return result


def _chunk(n: int, workers: int) -> int:
    """Records per chunk: 256 (as in training), or fewer, so that every process of the
    pool gets work from a small sample."""
    return max(1, min(CHUNK, -(-n // (2 * workers))))


def format_rates(result: dict) -> str:
    """The rates as a markdown table."""
    lines = [f"{result['device']}: {result['programs']} programs of {result['folder']}", "",
             "| reader | processes | read s | featurize s | seconds | programs per second |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    lines += [f"| {r['reader']} | {r['workers']} | {r['read_s']:.1f} | {r['featurize_s']:.1f} | {r['seconds']:.1f} | "
              f"{r['programs_per_s']:.1f} |" for r in result["rows"]]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench featurize-rate``'s arguments on an ``argparse`` parser."""
    parser.add_argument("-d", "--dataset", required=True, help="one device folder")
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="process counts to time")
    parser.add_argument("--max-records", type=int, default=4096, help="its first N measured programs")
    parser.add_argument("-o", "--out", default=None, help="JSON file to write (the markdown table goes beside it)")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench featurize-rate``."""
    result = featurize_rates(Path(args.dataset), list(args.workers), args.max_records)
    table = format_rates(result)
    print(table)
    if args.out:
        write_result(Path(args.out), result, table)
    return 0
