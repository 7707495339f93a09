"""Featurized programs per second, in one process and on a pool of processes, side by side.

A device folder's first ``--max-records`` measured tuning records are featurized once per
``--workers`` setting (:func:`cdmpp.featurize.parallel.featurize_records`, with
``PerStoreFeature`` rows, as ``cdmpp train`` featurizes an uncached folder), in one run,
so that the rates compare on the same machine.  Reading the records is timed apart.
Nothing is cached.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks import write_result
from cdmpp import dataset as ds
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.featurize.parallel import featurize_records


def featurize_rates(device_dir: Path, workers: list[int], max_records: int) -> dict:
    """Featurize the folder's first ``max_records`` programs once per entry of ``workers``.

    Returns:
        ``{"device", "folder", "programs", "read_s", "rows": [{"workers", "seconds",
        "programs_per_s"}, ...]}``; ``device`` is this machine's device id (where the
        timings ran), seconds are wall seconds.

    Raises:
        InputError: an empty or non-positive ``workers`` entry, ``max_records`` below 1.
        DatasetError: not a device folder.
    """

    if not workers or min(workers) < 1 or max_records < 1:
        raise InputError(f"workers must be >= 1 and max_records >= 1, got {workers} and {max_records}")
    t0 = time.perf_counter()
    db = ds.load_device_dir(Path(device_dir), max_records=max_records)
    read_s = time.perf_counter() - t0
    records = [p.record for p in db.programs]
    target = db.manifest.get("device", {}).get("target") or records[0].target
    result = {"device": local_cpu().device_id, "folder": str(device_dir), "programs": len(records),
              "read_s": round(read_s, 1), "rows": []}
    for w in workers:
        t0 = time.perf_counter()
        featurize_records(records, target, psf=True, workers=w, pool_from=0)
        secs = time.perf_counter() - t0
        result["rows"].append({"workers": w, "seconds": round(secs, 1), "programs_per_s": round(len(records) / secs, 1)})
        print(result["rows"][-1], flush=True)
    return result


def format_rates(result: dict) -> str:
    """The rates as a markdown table."""
    lines = [f"{result['device']}: {result['programs']} programs of {result['folder']} (read in "
             f"{result['read_s']} s)", "", "| processes | seconds | programs per second |", "| ---: | ---: | ---: |"]
    lines += [f"| {r['workers']} | {r['seconds']:.1f} | {r['programs_per_s']:.1f} |" for r in result["rows"]]
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
