"""The dataset card of a device folder (its ``README.md``): counts per network and family, the
latency range, noise, timing protocols, throughput and the sampling policy."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

from .dataset import (
    FAILURE_FILE,
    REMEASURE_FILE,
    WARM_RECORD_FILE,
    DeviceDatabase,
    load_device_json,
    resolve,
    tuned_starts,
)
from .device import vm_call_lines
from .records import iter_json_lines, label
from .schema import tasks_of


def drift_line(device_dir: Path) -> str:
    """The card line on run-to-run drift, from `remeasured.jsonl` when present."""
    path = resolve(Path(device_dir) / REMEASURE_FILE)
    if path is None:
        return "- Run-to-run drift: not measured (`cdmpp remeasure`)"
    drift = [
        abs(label(o["again"]) / label(o["run_secs"]) - 1)
        for _, o in iter_json_lines(path)
        if o.get("again")
    ]
    if not drift:
        return "- Run-to-run drift: no program re-measured successfully"
    return (
        f"- Run-to-run drift of the median, {len(drift)} programs timed again later (`cdmpp remeasure`): "
        f"median {100 * np.median(drift):.1f}%, p90 {100 * np.percentile(drift, 90):.1f}%"
    )


def _warm_lines(programs: list, manifest: dict) -> list[str]:
    """The card's lines on the warm protocol: programs timed warm, warm / cold label ratio,
    and what the warm timing costs in collection rate (none without warm timings)."""
    ratio = np.array([p.warm_latency / p.latency for p in programs if p.warm_secs is not None])
    if not ratio.size:
        return []
    total = warm_s = 0.0
    for run in manifest.get("collections", []):
        stages = run.get("stage_seconds", {})
        if stages.get("warm timing"):  # the per-program stages: task extraction and waits for a quiet machine left out
            total += sum(v for k, v in stages.items() if k not in ("task extraction", "quiet-machine wait"))
            warm_s += stages["warm timing"]
    cost = (f"; the warm timing took {100 * warm_s / total:.1f}% of the collections' time per program (task "
            f"extraction and quiet-machine waits left out), so the collection rate with it is "
            f"{1 - warm_s / total:.2f}x the rate without" if total else "")
    return [f"- Timing protocols: cold {len(programs)} programs, warm {ratio.size} (`{WARM_RECORD_FILE}`); "
            f"warm / cold label: median {np.median(ratio):.2f}, p10 {np.percentile(ratio, 10):.2f}, "
            f"p90 {np.percentile(ratio, 90):.2f}{cost}"]


def _family_lines(db: DeviceDatabase) -> list[str]:
    """The card's table of workloads and programs per network family and protocol."""
    m = db.manifest
    family_of = {n: v.get("family") or n.split("-")[0] for n, v in m.get("networks", {}).items()}
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    fam_wl: dict[str, set[int]] = {}
    for t in tasks_of(m):
        if t.workload_key in index_of:
            fam_wl.setdefault(family_of.get(t.network, t.network), set()).add(index_of[t.workload_key])
    cold = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workloads))
    warm = np.bincount([p.workload_index for p in db.programs if p.warm_secs is not None], minlength=len(db.workloads))
    lines = ["", "| family | workloads measured | cold programs | warm programs |", "| --- | ---: | ---: | ---: |"]
    for fam, idx in sorted(fam_wl.items()):
        ids = sorted(idx)
        lines.append(f"| {fam} | {int((cold[ids] > 0).sum())} | {int(cold[ids].sum())} | {int(warm[ids].sum())} |")
    return lines


def _sweep_lines(manifest: dict) -> list[str]:
    """The card's lines on the operator sweep's entries: how many, and how they were chosen."""
    entries = {n: v for n, v in manifest.get("networks", {}).items() if v.get("family") == "sweep"}
    if not entries:
        return []
    ways: dict[str, int] = {}
    for v in entries.values():
        way = v.get("chosen_by") or "drawn at random (`cdmpp collect --sweep N --sweep-seed S`)"
        ways[way] = ways.get(way, 0) + 1
    return [f"- Operator sweep: {len(entries)} entries", *(f"  - {n}: {way}" for way, n in ways.items())]


def _throughput_line(manifest: dict) -> str:

    n = secs = 0.0
    for c in manifest.get("collections", []):
        if "ended" in c and c.get("measured"):
            t0 = datetime.datetime.fromisoformat(c["started"])
            t1 = datetime.datetime.fromisoformat(c["ended"])
            n, secs = n + c["measured"], secs + (t1 - t0).total_seconds()
    if not secs:
        return "- Collection throughput: unknown"
    return (
        f"- Collection throughput on this machine: {60 * n / secs:.0f} measured programs per minute "
        f"({int(n)} programs in {secs / 3600:.1f} h of finished collections, task extraction included)"
    )


def _evolutionary_share(sampling: dict) -> str:
    """The card's note of the evolutionary share ('' when the manifest records none)."""
    frac = sampling.get("evolutionary_fraction")
    if frac is None:
        return ""
    if frac != 0:
        return f"; evolutionary_fraction {frac}"
    if "tuned_policy" in sampling:  # the rounds are random; the tuned phase's search follows them
        return "; evolutionary_fraction 0: the rounds are random samples, the tuned phase (below) follows them"
    return "; evolutionary_fraction 0: random samples only"


def _repeats_line(programs: list) -> str:
    """The card's count of programs by repeats kept (adaptive repeats stop some early)."""
    counts: dict[int, int] = {}
    for p in programs:
        counts[len(p.run_secs)] = counts.get(len(p.run_secs), 0) + 1
    parts = ", ".join(f"{k} repeats: {v}" for k, v in sorted(counts.items(), reverse=True))
    note = (" (adaptive repeats: a program stops early when its first repeats agree; "
            "`adaptive_repeats` in each collection's measurement)") if len(counts) > 1 else ""
    return f"- Programs by repeats kept: {parts}{note}"


def _tuned_lines(m: dict, per_wl: np.ndarray, index_of: dict[str, int]) -> list[str]:
    """The card's line on the tuned phase's programs (none without a tuned phase)."""
    starts = tuned_starts(m)
    if not starts:
        return []
    count = sum(max(0, int(per_wl[index_of[k]]) - s) for k, s in starts.items() if k in index_of)
    return [f"- Tuned phase (the fast-end policy, `sampling.tuned_policy`): {count} programs of {len(starts)} tasks, "
            f"each task's records from its manifest entry's `tuned_from` on"]


def card(device_dir: Path) -> str:
    """A markdown dataset card of one device folder: counts, latency range and noise.

    Counts are per network (a workload shared by networks counts in each), the noise
    is the coefficient of variation of each program's repeats (median and p90).  The records
    are read as plain JSON (:func:`cdmpp.dataset.load_device_json`): no TVM object is built.
    """
    db = load_device_json(device_dir)
    m = db.manifest
    lat = np.array([p.latency for p in db.programs])
    cv = np.array([np.std(p.run_secs) / np.mean(p.run_secs) for p in db.programs])
    per_wl = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workloads))
    failures = 0
    fpath = resolve(Path(device_dir) / FAILURE_FILE)
    if fpath is not None:
        failures = sum(1 for _ in iter_json_lines(fpath))
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    nets: dict[str, list[int]] = {}
    tasks = tasks_of(m)
    for t in tasks:
        nets.setdefault(t.network, []).append(index_of.get(t.workload_key, -1))
    device_json = m.get("device", {})
    lines = [
        f"# Dataset card: `{db.device_id}`",
        "",
        f"- Device: {device_json.get('model', '?')}, {device_json.get('cores', '?')} cores, ISA {device_json.get('isa', '?')}; "
        f"TVM target `{json.dumps(device_json.get('target', {}))}`",
        f"- TVM {m.get('tvm_version', '?')}; measurement {json.dumps(m.get('measurement', {}))}",
        f"- Sampling: {m.get('sampling', {}).get('policy', '?')}; seed {m.get('sampling', {}).get('seed', '?')}"
        + _evolutionary_share(m.get("sampling", {})),
        *([f"- Program inputs: {m['inputs']}"] if m.get("inputs") else []),
        f"- Measured programs: {len(db.programs)} over {int((per_wl > 0).sum())} workloads; "
        f"failed builds/runs kept in `{FAILURE_FILE}`: {failures}",
        f"- Latency (median of repeats): min {lat.min() * 1e6:.2f} us, median {np.median(lat) * 1e6:.1f} us, "
        f"max {lat.max() * 1e3:.2f} ms",
        f"- Repeat CV: median {100 * np.median(cv):.1f}%, p90 {100 * np.percentile(cv, 90):.1f}%",
        _repeats_line(db.programs),
        *_tuned_lines(m, per_wl, index_of),
        *_warm_lines(db.programs, m), *vm_call_lines(m), drift_line(device_dir), _throughput_line(m),
        *_sweep_lines(m), *_family_lines(db),
        "",
        "| network | tasks measured / listed | task weight | programs |",
        "| --- | ---: | ---: | ---: |",
    ]
    for net, idx in nets.items():
        weight = sum(t.weight for t in tasks if t.network == net)
        progs = int(sum(per_wl[i] for i in set(idx) if i >= 0))
        measured = sum(1 for i in idx if i >= 0 and per_wl[i] > 0)
        lines.append(f"| {net} | {measured} / {len(idx)} | {weight} | {progs} |")
    lines += ["", "| network | task | weight | FLOPs | programs |", "| --- | --- | ---: | ---: | ---: |"]
    for t in tasks:
        i = index_of.get(t.workload_key, -1)
        lines.append(f"| {t.network} | {t.task_name} | {t.weight} | {t.flops:.3g} | {per_wl[i] if i >= 0 else 0} |")
    return "\n".join(lines) + "\n"
