"""Reading, validating and describing cdmpp datasets.

A dataset is a folder with one sub-folder per device id.  Each device folder holds
TVM MetaSchedule's standard JSONDatabase files plus two cdmpp files::

    <dataset>/<device_id>/database_workload.json[.gz]       # MetaSchedule workloads
    <dataset>/<device_id>/database_tuning_record.json[.gz]  # MetaSchedule tuning records (cold)
    <dataset>/<device_id>/database_tuning_record_warm.json[.gz]  # the same programs timed warm
    <dataset>/<device_id>/failures.jsonl[.gz]               # failed builds/runs, with errors
    <dataset>/<device_id>/manifest.json                     # device, settings, tasks

A tuning record's ``run_secs`` holds every timing repeat (seconds); the label is
their median.  Two timing protocols: ``cold`` (a CPU cache flush before each repeat,
the main record file) and ``warm`` (no flush, repeats back to back, as a kernel runs
inside a network; its own record file, where collected).  TVM's ``JSONDatabase`` opens
either record file with the workload file.  Plain files are what ``cdmpp collect`` appends to; ``.gz`` files are
the compressed form shipped in ``datasets/``.  Readers take either.
"""

from __future__ import annotations

import datetime
import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cdmpp.device import vm_call_lines
from cdmpp.errors import CdmppError
from cdmpp.records import (  # noqa: F401  (BadLine, iter_json_lines, open_text, valid_run_secs: re-exported)
    BadLine,
    iter_json_lines,
    label,
    open_text,
    read_records,
    read_workload_keys,
    read_workload_lines,
    trace_key,
    valid_run_secs,
)

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
WARM_RECORD_FILE = "database_tuning_record_warm.json"
PROTOCOLS = ("cold", "warm")  #: timing protocols, by record file: RECORD_FILE, WARM_RECORD_FILE
WARM_SUFFIX = "+warm"  #: a device id with it names that device's warm protocol (a row of a model's device table)


def warm_device_id(device_id: str) -> str:
    """The id of a device's warm protocol: ``"cpu-...-avx512+warm"``."""
    return device_id + WARM_SUFFIX
FAILURE_FILE = "failures.jsonl"
MANIFEST_FILE = "manifest.json"
REMEASURE_FILE = "remeasured.jsonl"


class DatasetError(CdmppError, ValueError):
    """A dataset file is missing, empty or malformed."""


def resolve(path: Path) -> Path | None:
    """``path`` if it exists, else ``path.gz`` if that exists, else ``None``."""
    path = Path(path)
    if path.exists():
        return path
    gz = path.with_name(path.name + ".gz")
    return gz if gz.exists() else None


def database_files(folder: Path, required: bool = True) -> tuple[Path, Path] | None:
    """The two files of a MetaSchedule JSONDatabase folder (a device folder or a tuning
    work dir): ``(workload file, tuning-record file)``, each plain or gzipped
    (:func:`resolve`).  The one place that locates them.

    Raises:
        DatasetError: with ``required``, the folder lacks one of them (``None`` is
            returned instead without it).
    """
    folder = Path(folder)
    wl, rec = resolve(folder / WORKLOAD_FILE), resolve(folder / RECORD_FILE)
    if wl is None or rec is None:
        if not required:
            return None
        missing = " and ".join(n for n, p in ((WORKLOAD_FILE, wl), (RECORD_FILE, rec)) if p is None)
        raise DatasetError(f"{folder}: no {missing} (a MetaSchedule JSONDatabase folder holds "
                           f"{WORKLOAD_FILE} and {RECORD_FILE}, plain or gzipped)")
    return wl, rec


@dataclass
class MeasuredProgram:
    """One tuning record with its label.

    Attributes:
        workload_index: row of the workload in the database's workload file.
        record: the MetaSchedule ``TuningRecord`` (trace, workload, run_secs, target).
        run_secs: float64 array, shape ``(repeat,)``: every timing repeat in seconds (cold protocol).
        warm_secs: float64 array, shape ``(repeat,)``: the same program's repeats under the
            warm protocol (no cache flush), or ``None`` where it was not timed warm.
    """

    workload_index: int
    record: object
    run_secs: np.ndarray
    warm_secs: np.ndarray | None = None

    @property
    def latency(self) -> float:
        """The label: median of the repeats, in seconds."""
        return label(self.run_secs)

    @property
    def warm_latency(self) -> float:
        """The warm label: median of the warm repeats, in seconds; NaN where not timed warm."""
        return label(self.warm_secs) if self.warm_secs is not None else float("nan")


@dataclass
class DeviceDatabase:
    """A device's measured programs, as read from a MetaSchedule JSONDatabase.

    Attributes:
        device_id: the device id (folder name, or ``"unknown"`` for a bare database).
        workloads: MetaSchedule ``Workload`` objects, in file order.
        workload_keys: their structural-hash strings (the first JSON field of a line).
        programs: every tuning record with a successful measurement.
        manifest: the parsed ``manifest.json``, or ``{}`` for a bare database.
        bad_lines: lines that could not be parsed (skipped, reported by ``validate``).
    """

    device_id: str
    workloads: list
    workload_keys: list[str]
    programs: list[MeasuredProgram]
    manifest: dict = field(default_factory=dict)
    bad_lines: list[BadLine] = field(default_factory=list)

    def tasks_by_workload(self) -> dict[str, list[dict]]:
        """Manifest task entries grouped by workload key (a workload may occur in several networks)."""
        out: dict[str, list[dict]] = {}
        for task in self.manifest.get("tasks", []):
            out.setdefault(task["workload_key"], []).append(task)
        return out


def _warm_by_trace(warm_path: Path | None, bad: list[BadLine]) -> dict[tuple[int, str], np.ndarray]:
    """The warm protocol's repeats, by (workload index, the trace's JSON text)."""
    out: dict[tuple[int, str], np.ndarray] = {}
    if warm_path is None:
        return out
    for rec in read_records(warm_path, bad, measured=True):
        out[(rec.workload_index, trace_key(rec.trace))] = rec.run_secs
    return out


def warm_repeats(device_dir: Path) -> list[np.ndarray | None] | None:
    """The warm protocol's repeats (seconds) of each program of a device folder, in the
    order :func:`load_device_dir` keeps its programs (its valid cold records, in file
    order), read as plain JSON; ``None`` for a program not timed warm.  ``None`` when the
    folder has no warm record file."""
    warm_path, files = resolve(Path(device_dir) / WARM_RECORD_FILE), database_files(device_dir, required=False)
    if warm_path is None or files is None:
        return None
    wl, rec = files
    n_workloads = len(read_workload_keys(wl))
    warm = _warm_by_trace(warm_path, [])
    return [warm.get((r.workload_index, trace_key(r.trace))) for r in read_records(rec, n_workloads=n_workloads,
                                                                                   measured=True)]


def load_database(
    workload_path: Path, record_path: Path, device_id: str = "unknown", manifest: dict | None = None,
    records: bool = True, max_records: int | None = None, warm_path: Path | None = None,
) -> DeviceDatabase:
    """Read a MetaSchedule JSONDatabase (plain or gzip files).

    Records without ``run_secs``, or with a non-positive or non-finite repeat, or whose
    workload index is out of range, are skipped and listed in ``bad_lines``.
    ``records=False`` reads the workloads only (``programs`` is empty): seconds instead
    of minutes for a large folder, for callers that only pick workloads.  ``max_records``
    stops after that many measured programs, in file order.  ``warm_path``: the warm
    protocol's record file; each program whose trace it holds gets ``warm_secs``.

    Raises:
        DatasetError: a file is missing, or the database holds no measured record
            (with ``records``).
    """
    from .tvm_compat import TuningRecord, Workload  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    for p in (workload_path, record_path):
        if not Path(p).exists():
            raise DatasetError(f"database file not found: {p}")
    bad: list[BadLine] = []
    workloads, keys = [], []
    index_of_line: dict[int, int] = {}
    for lineno, key, obj in read_workload_lines(workload_path, bad):
        try:
            workloads.append(Workload.from_json(obj))
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            bad.append(BadLine(str(workload_path), lineno, f"bad workload: {err}"[:300], str(obj)[:200]))
            continue
        index_of_line[len(index_of_line)] = len(workloads) - 1
        keys.append(key)
    programs = []
    if not records:
        return DeviceDatabase(device_id, workloads, keys, programs, manifest or {}, bad)
    warm = _warm_by_trace(warm_path, bad)
    for line in read_records(record_path, bad, n_workloads=len(index_of_line)):
        if line.run_secs is None:
            continue
        widx = line.workload_index
        try:
            rec = TuningRecord.from_json(line.record, workloads[index_of_line[widx]])
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            bad.append(BadLine(str(record_path), line.lineno, f"bad tuning record: {err}"[:300], str(line.record)[:200]))
            continue
        warm_secs = warm.get((widx, trace_key(line.trace))) if warm else None
        programs.append(MeasuredProgram(index_of_line[widx], rec, line.run_secs, warm_secs))
        if max_records is not None and len(programs) >= max_records:
            break
    if not programs:
        raise DatasetError(f"no measured tuning record in {record_path}")
    return DeviceDatabase(device_id, workloads, keys, programs, manifest or {}, bad)


def measured_workload_keys(device_dir: Path) -> set[str]:
    """Workload keys (structural hashes) a JSONDatabase folder holds a valid measurement of; JSON only, no TVM."""
    files = database_files(device_dir, required=False)
    if files is None:
        return set()
    keys = read_workload_keys(files[0])
    return {keys[r.workload_index] for r in read_records(files[1], n_workloads=len(keys), measured=True)}


def device_dirs(dataset: Path) -> list[Path]:
    """Device folders of a dataset (those holding a tuning-record file), sorted."""
    dataset = Path(dataset)
    if resolve(dataset / RECORD_FILE):
        return [dataset]
    if not dataset.is_dir():
        raise DatasetError(f"dataset folder not found: {dataset}")
    dirs = sorted(p for p in dataset.iterdir() if p.is_dir() and resolve(p / RECORD_FILE))
    if not dirs:
        raise DatasetError(f"no device folder with {RECORD_FILE} under {dataset}")
    return dirs


def load_device_dir(path: Path, records: bool = True, max_records: int | None = None) -> DeviceDatabase:
    """Read one device folder of a dataset (see the module docstring); ``records=False``:
    its workloads and manifest only, ``max_records``: its first measured programs only
    (:func:`load_database`)."""
    path = Path(path)
    wl, rec = database_files(path)
    manifest = read_manifest(path)
    return load_database(wl, rec, manifest.get("device", {}).get("device_id", path.name), manifest, records,
                         max_records, resolve(path / WARM_RECORD_FILE))


def read_manifest(path: Path) -> dict:
    """The device folder's manifest, or ``{}`` when it has none."""
    m = Path(path) / MANIFEST_FILE
    if not m.exists():
        return {}
    try:
        return json.loads(m.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise DatasetError(f"corrupt manifest {m}: {err}") from err


def write_json_atomic(path: Path, obj: object) -> None:
    """Write JSON to ``path`` through a temporary file and a rename, so a crash leaves the old file."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


def repair_jsonl(path: Path) -> list[BadLine]:
    """Move unparseable lines of an append-only JSON-lines file aside.

    A collection killed mid-write can leave a truncated last line, which would stop
    TVM's ``JSONDatabase`` from loading.  Bad lines are appended to ``<path>.corrupt``
    (nothing is deleted) and the file is rewritten without them.

    Returns:
        The lines moved aside (empty when the file was clean or missing).
    """
    path = Path(path)
    if not path.exists():
        return []
    bad: list[BadLine] = []
    good = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                json.loads(line)
                good.append(line if line.endswith("\n") else line + "\n")
            except json.JSONDecodeError as err:
                bad.append(BadLine(str(path), lineno, f"invalid JSON: {err.msg}", line.rstrip("\n")))
    if bad:
        with open(path.with_name(path.name + ".corrupt"), "a", encoding="utf-8") as f:
            for b in bad:
                f.write(b.text + "\n")
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(good), encoding="utf-8")
        os.replace(tmp, path)
    return bad


def unpack(path: Path) -> bool:
    """Recreate the plain append-only file ``path`` from its shipped ``path.gz``.

    Appending to a missing plain file while a ``.gz`` holds earlier lines would start
    a file without them, and the next :func:`pack` would overwrite the ``.gz`` with
    it, losing those lines; every writer calls this first.

    Returns:
        True when the plain file was written (it was missing and the ``.gz`` exists).
    """
    path = Path(path)
    gz = path.with_name(path.name + ".gz")
    if path.exists() or not gz.exists():
        return False
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(gz, "rb") as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(tmp, path)
    return True


def pack(device_dir: Path) -> list[Path]:
    """Gzip a device folder's append-only files for shipping (``<name>.gz`` beside them).

    The plain files stay (a collection keeps appending to them); readers take the
    plain file when both exist.  Returns the ``.gz`` paths written.
    """
    out = []
    for name in (WORKLOAD_FILE, RECORD_FILE, WARM_RECORD_FILE, FAILURE_FILE, REMEASURE_FILE):
        src = Path(device_dir) / name
        if not src.exists():
            continue
        dst = src.with_name(name + ".gz")
        tmp = dst.with_name(dst.name + ".tmp")
        with open(src, "rb") as f, gzip.GzipFile(tmp, "wb", compresslevel=9, mtime=0) as g:
            g.write(f.read())
        os.replace(tmp, dst)
        out.append(dst)
    return out


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
    for t in m.get("tasks", []):
        if t.get("workload_key") in index_of:
            fam_wl.setdefault(family_of.get(t["network"], t["network"]), set()).add(index_of[t["workload_key"]])
    cold = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workloads))
    warm = np.bincount([p.workload_index for p in db.programs if p.warm_secs is not None], minlength=len(db.workloads))
    lines = ["", "| family | workloads measured | cold programs | warm programs |", "| --- | ---: | ---: | ---: |"]
    for fam, idx in sorted(fam_wl.items()):
        ids = sorted(idx)
        lines.append(f"| {fam} | {int((cold[ids] > 0).sum())} | {int(cold[ids].sum())} | {int(warm[ids].sum())} |")
    return lines


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


def tuned_starts(manifest: dict) -> dict[str, int]:
    """Per workload key with a tuned phase, the count of its records (in file order)
    measured before that phase began (the smallest ``tuned_from`` of its tasks)."""
    starts: dict[str, int] = {}
    for t in manifest.get("tasks", []):
        if "tuned_from" in t:
            start = int(t["tuned_from"])
            starts[t["workload_key"]] = min(start, starts.get(t["workload_key"], start))
    return starts


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
    is the coefficient of variation of each program's repeats (median and p90).
    """
    db = load_device_dir(device_dir)
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
    for t in m.get("tasks", []):
        nets.setdefault(t["network"], []).append(index_of.get(t["workload_key"], -1))
    dev = m.get("device", {})
    lines = [
        f"# Dataset card: `{db.device_id}`",
        "",
        f"- Device: {dev.get('model', '?')}, {dev.get('cores', '?')} cores, ISA {dev.get('isa', '?')}; "
        f"TVM target `{json.dumps(dev.get('target', {}))}`",
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
        *_family_lines(db),
        "",
        "| network | tasks measured / listed | task weight | programs |",
        "| --- | ---: | ---: | ---: |",
    ]
    for net, idx in nets.items():
        weight = sum(int(t["weight"]) for t in m["tasks"] if t["network"] == net)
        progs = int(sum(per_wl[i] for i in set(idx) if i >= 0))
        measured = sum(1 for i in idx if i >= 0 and per_wl[i] > 0)
        lines.append(f"| {net} | {measured} / {len(idx)} | {weight} | {progs} |")
    lines += ["", "| network | task | weight | FLOPs | programs |", "| --- | --- | ---: | ---: | ---: |"]
    for t in m.get("tasks", []):
        i = index_of.get(t["workload_key"], -1)
        lines.append(
            f"| {t['network']} | {t['task_name']} | {t['weight']} | {t['flops']:.3g} | {per_wl[i] if i >= 0 else 0} |"
        )
    return "\n".join(lines) + "\n"
