"""``cdmpp bench warm-protocol``: which timing protocol a kernel runs at inside a network.

The collector times each program cold (the CPU cache flushed before every repeat) and,
where the folder has warm timings, warm (no flush, after an untimed run:
``database_tuning_record_warm.json``).  A warm repeat is one run (``warm_min_repeat_ms``
0) or runs back to back until it lasts that many ms.  This study reads what is stored;
it times nothing.

- **Device folders** (``-d``): each program's cold label over its warm label, by the
  protocol of the collection that wrote it (the manifest's ``collections``, in the record
  file's order, each with its ``measurement``), by family (the operator sweep's entries
  against the zoo's networks) and by cold latency.  Two protocols compared on programs of
  one family and one latency band show what the protocol itself changes.
- **Truth-check rows** (``--truth-check``, written by ``cdmpp bench truth-check --retime
  --profile N --output``): each task's time inside the network (the Relax VM instrument)
  over its record retimed cold and retimed warm in the same run, by kernel class and by
  warm latency; and per row, the profiled kernels' sum less the end-to-end time, per
  kernel call.  The end-to-end time holds every kernel and the VM's own work besides, so
  that excess is a lower bound on what the instrument adds to each kernel it times.
- **The checkpoint's estimates against each measurement** (``--estimates``: truth-check
  files, one per checkpoint, such as the files ``cdmpp bench truth-check --rescore``
  writes): per kernel class and warm band, the level (mean log predicted / measured) and
  the share within 1.25x of the cold estimate against the record retimed cold, and of the
  warm estimate against the record retimed warm and against the task's time inside the
  network.  A checkpoint that
  learns the warm protocol well can still be far from the time inside the network when
  the two protocols differ.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from benchmarks import read_truth_check_rows, render_table, write_result
from cdmpp import dataset as ds
from cdmpp.errors import InputError
from cdmpp.kernel_class import class_levels
from cdmpp.records import read_records, read_workload_keys, trace_key

BANDS_US = (0.0, 5.0, 20.0, 100.0, 1000.0, math.inf)
"""Latency bands (microseconds) the ratios are split by."""

BAND_NAMES = tuple(f"[{lo:g}, {hi:g}) us" if math.isfinite(hi) else f">= {lo:g} us"
                   for lo, hi in zip(BANDS_US, BANDS_US[1:]))
"""The bands' names, in order."""


def band(seconds: float) -> str:
    """The latency band of ``seconds`` (one of :data:`BAND_NAMES`, such as ``"[5, 20) us"``).

    Raises:
        ValueError: ``seconds`` is not a positive finite number.
    """
    us = seconds * 1e6
    for name, lo, hi in zip(BAND_NAMES, BANDS_US, BANDS_US[1:]):
        if lo <= us < hi and seconds > 0:
            return name
    raise ValueError(f"latency {seconds!r} s is not a positive finite number")


def _stats(ratios: list[float]) -> dict:
    r = np.asarray(ratios, dtype=np.float64)
    return {"n": int(r.size), "median": float(np.median(r)), "p10": float(np.percentile(r, 10)),
            "p90": float(np.percentile(r, 90))}


def collection_protocols(manifest: dict, n_records: int) -> list[int]:
    """Each record line's warm protocol (``warm_min_repeat_ms``; 0 where the collection
    did not set it), from the manifest's collections in file order.

    Raises:
        InputError: the collections' ``measured`` counts do not add up to the record
            file's ``n_records`` lines, so a line cannot be placed in its collection.
    """
    out: list[int] = []
    for c in manifest.get("collections", []):
        out += [int(c.get("measurement", {}).get("warm_min_repeat_ms") or 0)] * int(c.get("measured", 0))
    if len(out) != n_records:
        raise InputError(f"the manifest's collections measured {len(out)} programs but the record file has "
                         f"{n_records} lines: a line's collection, and so its warm protocol, is unknown")
    return out


def folder_ratios(device_dir: Path) -> list[dict]:
    """Cold label over warm label of each program of ``device_dir`` timed both ways, grouped.

    Returns:
        One dict per (family, ``warm_min_repeat_ms``, cold latency band) with ``device``,
        ``family`` (``"sweep"`` or ``"zoo"``), ``warm_min_repeat_ms``, ``band``, ``n``, and
        the ``median``, ``p10``, ``p90`` of cold / warm.

    Raises:
        InputError: the folder has no warm record file, or its manifest cannot place
            each record in a collection (:func:`collection_protocols`).
        DatasetError: the folder lacks its database files.
    """
    device_dir = Path(device_dir)
    warm_path = ds.resolve(device_dir / ds.WARM_RECORD_FILE)
    if warm_path is None:
        raise InputError(f"{device_dir}: no warm timings ({ds.WARM_RECORD_FILE}); nothing to compare")
    wl_path, rec_path = ds.database_files(device_dir)
    manifest = ds.read_manifest(device_dir)
    keys = read_workload_keys(wl_path)
    sweep = {t["workload_key"] for t in manifest.get("tasks", []) if str(t.get("network", "")).startswith("sweep")}
    lines = list(read_records(rec_path, n_workloads=len(keys)))
    protocols = collection_protocols(manifest, len(lines))
    cold = {(r.workload_index, trace_key(r.trace)): (r.label, p) for r, p in zip(lines, protocols)
            if r.run_secs is not None}
    groups: dict[tuple[str, int, str], list[float]] = {}
    for w in read_records(warm_path, n_workloads=len(keys), measured=True):
        hit = cold.get((w.workload_index, trace_key(w.trace)))
        if hit is None:
            continue
        label, proto = hit
        family = "sweep" if keys[w.workload_index] in sweep else "zoo"
        groups.setdefault((family, proto, band(label)), []).append(label / w.label)
    order = {name: i for i, name in enumerate(BAND_NAMES)}
    return [{"device": device_dir.name, "family": f, "warm_min_repeat_ms": p, "band": b, **_stats(v)}
            for (f, p, b), v in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]]))]


def in_network_ratios(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """A task's time inside the network over its record retimed cold and warm, and the
    instrument's excess per row (module docstring).

    Args:
        rows: truth-check rows with ``per_task`` entries carrying ``in_network_s``,
            ``retimed_s``, ``retimed_warm_s``, ``kernel_class``, ``weight`` (seconds).

    Returns:
        ``(bands, excess)``: ``bands`` one dict per (kernel class, retimed warm band) with
        ``n`` and ``in_over_cold`` / ``in_over_warm`` (each ``median``, ``p10``, ``p90``);
        ``excess`` one dict per row with ``network``, ``schedules``, ``kernel_calls``
        (profiled calls per inference), ``profiled_kernels_s``, ``measured_e2e_s`` and
        ``excess_per_call_s`` (their difference over the calls).

    Raises:
        InputError: no row has in-network times (run the truth check with ``--profile``
            and ``--retime``).
    """
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    excess = []
    for r in rows:
        timed = [t for t in r.get("per_task", []) if t.get("in_network_s") and not t.get("view")]
        for t in timed:
            cold, warm = t.get("retimed_s"), t.get("retimed_warm_s")
            if cold and warm:
                groups.setdefault((t.get("kernel_class", "?"), band(warm)), []).append(
                    (t["in_network_s"] / cold, t["in_network_s"] / warm))
        calls = sum(t["weight"] for t in timed)
        if calls and r.get("profiled_kernels_s"):
            excess.append({"network": r["network"], "schedules": r.get("schedules"), "kernel_calls": calls,
                           "profiled_kernels_s": r["profiled_kernels_s"], "measured_e2e_s": r["measured_e2e_s"],
                           "excess_per_call_s": (r["profiled_kernels_s"] - r["measured_e2e_s"]) / calls})
    if not groups:
        raise InputError("no truth-check row has in-network and retimed times per task: "
                         "run cdmpp bench truth-check with --retime and --profile")
    order = {name: i for i, name in enumerate(BAND_NAMES)}
    bands = [{"kernel_class": k, "band": b, "n": len(v), "in_over_cold": _stats([c for c, _ in v]),
              "in_over_warm": _stats([w for _, w in v])}
             for (k, b), v in sorted(groups.items(), key=lambda kv: (kv[0][0], order[kv[0][1]]))]
    return bands, excess


COMPARISONS = (("cold estimate / retimed cold", "estimate_s", "retimed_s"),
               ("warm estimate / retimed warm", "warm_estimate_s", "retimed_warm_s"),
               ("warm estimate / in network", "warm_estimate_s", "in_network_s"))
"""``(name, predicted key, measured key)`` of a truth-check task entry, per comparison."""


def estimate_levels(rows: list[dict]) -> list[dict]:
    """The estimates' level against each measurement of the same record (module docstring).

    Only the tasks that have every measurement (retimed cold and warm, and a time inside
    the network; views excluded) count, so the three comparisons share their tasks up to
    a missing or zero prediction.

    Args:
        rows: truth-check rows of one checkpoint; ``per_task`` entries with
            ``kernel_class``, ``weight``, ``estimate_s``, ``warm_estimate_s``,
            ``retimed_s``, ``retimed_warm_s`` and ``in_network_s`` (seconds).

    Returns:
        One dict per (kernel class, retimed warm band, comparison), and per (kernel
        class, ``"all"``, comparison): ``kernel_class``, ``band``, ``comparison`` (a
        :data:`COMPARISONS` name), ``tasks``, ``level`` (mean log predicted / measured)
        and ``within`` (share within 1.25x).

    Raises:
        InputError: no task has every measurement (run the truth check with
            ``--retime`` and ``--profile``).
    """
    tasks = [t for r in rows for t in r.get("per_task", [])
             if not t.get("view") and t.get("in_network_s") and t.get("retimed_s") and t.get("retimed_warm_s")]
    if not tasks:
        raise InputError("no truth-check task has retimed cold, retimed warm and in-network times: "
                         "run cdmpp bench truth-check with --retime and --profile")
    out = []
    order = {name: i for i, name in enumerate(("all", *BAND_NAMES))}
    for name, pred_key, meas_key in COMPARISONS:
        keyed = []
        for t in tasks:
            cls = t.get("kernel_class", "?")
            for b in ("all", band(t["retimed_warm_s"])):
                keyed.append((f"{cls}\t{b}", t["weight"], t.get(pred_key), t.get(meas_key)))
        for key, level in class_levels(keyed).items():
            cls, b = key.split("\t")
            out.append({"kernel_class": cls, "band": b, "comparison": name, "tasks": level.tasks,
                        "level": level.mean_log_ratio, "within": level.within})
    names = [c[0] for c in COMPARISONS]
    return sorted(out, key=lambda r: (r["kernel_class"], order[r["band"]], names.index(r["comparison"])))


def format_warm_protocol(result: dict, markdown: bool = False) -> str:
    """The study's tables (cold / warm per folder; in-network ratios; instrument excess;
    each checkpoint's estimates against each measurement)."""

    def q(s: dict) -> str:
        return f"{s['median']:.2f} ({s['p10']:.2f}-{s['p90']:.2f})"

    parts = []
    if result.get("folders"):
        head = ["device", "family", "warm_min_repeat_ms", "cold band", "programs", "cold / warm median (p10-p90)"]
        parts.append(render_table(head, [[r["device"], r["family"], str(r["warm_min_repeat_ms"]), r["band"], str(r["n"]),
                                          q(r)] for r in result["folders"]], markdown, left=4))
    if result.get("in_network"):
        head = ["kernel class", "retimed warm band", "tasks", "in network / retimed cold", "in network / retimed warm"]
        parts.append(render_table(head, [[r["kernel_class"], r["band"], str(r["n"]), q(r["in_over_cold"]),
                                          q(r["in_over_warm"])] for r in result["in_network"]], markdown))
    if result.get("excess"):
        head = ["network", "schedules", "kernel calls", "profiled kernels ms", "e2e ms", "excess per call us"]
        parts.append(render_table(head, [[r["network"], str(r["schedules"]), str(r["kernel_calls"]),
                                          f"{r['profiled_kernels_s'] * 1e3:.2f}", f"{r['measured_e2e_s'] * 1e3:.2f}",
                                          f"{r['excess_per_call_s'] * 1e6:.1f}"] for r in result["excess"]], markdown))
    if result.get("estimates"):
        names = [c[0] for c in COMPARISONS]
        cells: dict[tuple, dict] = {}
        for r in result["estimates"]:
            cells.setdefault((r["source"], r["kernel_class"], r["band"]), {})[r["comparison"]] = r
        head = ["truth check (checkpoint)", "kernel class", "retimed warm band", "tasks",
                *(f"{n}: level, within 1.25x" for n in names)]
        body = []
        for (source, cls, b), by in cells.items():
            body.append([source, cls, b, str(max(c["tasks"] for c in by.values())),
                         *(f"{by[n]['level']:+.2f}, {by[n]['within']:.0%}" if n in by else "-" for n in names)])
        parts.append(render_table(head, body, markdown, left=3))
    return "\n\n".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench warm-protocol``'s arguments."""
    parser.add_argument("-d", "--device-folders", nargs="*", default=[],
                        help="device folders with warm timings: cold / warm per collection protocol")
    parser.add_argument("--truth-check", nargs="*", default=[],
                        help="truth-check JSON files (--retime --profile): in-network / retimed, instrument excess")
    parser.add_argument("--estimates", nargs="*", default=[],
                        help="truth-check JSON files, one per checkpoint (--retime --profile, or --rescore of such a "
                             "file): each checkpoint's cold and warm estimates against each measurement")
    parser.add_argument("-o", "--output", default=None,
                        help="also write the result as JSON here (the tables beside it, .md)")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench warm-protocol``."""
    if not args.device_folders and not args.truth_check and not args.estimates:
        raise InputError("give device folders (-d) or truth-check JSON files (--truth-check, --estimates)")
    result: dict = {"folders": [r for d in args.device_folders for r in folder_ratios(Path(d))]}
    rows = read_truth_check_rows(args.truth_check)
    if rows:
        result["in_network"], result["excess"] = in_network_ratios(rows)
    if args.estimates:
        result["estimates"] = [{"source": Path(f).name, **r} for f in args.estimates
                               for r in estimate_levels(read_truth_check_rows([f]))]
    table = format_warm_protocol(result, markdown=True)
    print(table)
    if args.output:
        write_result(Path(args.output), result, table)
        print(f"result written to {args.output} (the tables beside it, .md)")
    return 0
