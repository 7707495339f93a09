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

import gzip
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cdmpp.device import PROTOCOLS  # noqa: F401  (re-exported)
from cdmpp.errors import DatasetError  # noqa: F401  (re-exported)
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
from cdmpp.schema import Manifest, TaskEntry, parse_manifest, tasks_of

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
WARM_RECORD_FILE = "database_tuning_record_warm.json"
FAILURE_FILE = "failures.jsonl"
MANIFEST_FILE = "manifest.json"
REMEASURE_FILE = "remeasured.jsonl"


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
        out: dict[str, list[TaskEntry]] = {}
        for task in tasks_of(self.manifest):
            out.setdefault(task.workload_key, []).append(task)
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


def load_device_json(path: Path) -> DeviceDatabase:
    """:func:`load_device_dir` read as plain JSON, for callers that need the labels and not
    the TVM objects: seconds where parsing 100,000 records into TVM objects takes minutes.

    ``workloads`` are the workload lines' JSON (``[structural hash, IRModule JSON]``, what
    ``Workload.from_json`` takes) and each program's ``record`` the record's JSON
    (``[trace, run_secs, target, args_info]``, :class:`cdmpp.records.RecordLine`).  The
    programs, their order, ``run_secs`` and ``warm_secs`` are those of
    :func:`load_device_dir`, except that a record or workload TVM would reject is kept;
    lines that are not JSONDatabase lines go to ``bad_lines``.

    Raises:
        DatasetError: a database file is missing, or the folder holds no measured record.
    """
    path = Path(path)
    wl, rec = database_files(path)
    manifest = read_manifest(path)
    bad: list[BadLine] = []
    lines = list(read_workload_lines(wl, bad))
    warm = _warm_by_trace(resolve(path / WARM_RECORD_FILE), bad)
    programs = [MeasuredProgram(r.workload_index, r.record, r.run_secs,
                                warm.get((r.workload_index, trace_key(r.trace))) if warm else None)
                for r in read_records(rec, bad, n_workloads=len(lines), measured=True)]
    if not programs:
        raise DatasetError(f"no measured tuning record in {rec}")
    return DeviceDatabase(manifest.get("device", {}).get("device_id", path.name), [obj for _, _, obj in lines],
                          [key for _, key, _ in lines], programs, manifest, bad)


def _manifest_json(path: Path) -> tuple[dict, Path]:
    m = Path(path) / MANIFEST_FILE
    if not m.exists():
        return {}, m
    try:
        return json.loads(m.read_text(encoding="utf-8")), m
    except json.JSONDecodeError as err:
        raise DatasetError(f"corrupt manifest {m}: {err}") from err


def read_manifest(path: Path) -> dict:
    """The device folder's manifest as JSON, validated (:class:`cdmpp.schema.Manifest`), or
    ``{}`` when it has none; :func:`manifest_of` gives it typed.

    Raises:
        DatasetError: corrupt JSON, or a malformed manifest (the message names the file and
            the field).
    """
    data, m = _manifest_json(path)
    parse_manifest(data, m)
    return data


def manifest_of(path: Path) -> Manifest:
    """The device folder's typed manifest (an empty one when it has none).

    Raises:
        DatasetError: corrupt JSON, or a malformed manifest (named file and field).
    """
    return parse_manifest(*_manifest_json(path))


def write_manifest(device_dir: Path, manifest: dict) -> None:
    """Write a device folder's manifest, validated first (:class:`cdmpp.schema.Manifest`), so
    that no malformed manifest is ever stored; atomic as :func:`write_json_atomic`.

    Raises:
        DatasetError: the manifest is malformed (the message names the file and the field);
            the stored one is left as it was.
    """
    path = Path(device_dir) / MANIFEST_FILE
    parse_manifest(manifest, path)
    write_json_atomic(path, manifest)


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


def tuned_starts(manifest: dict) -> dict[str, int]:
    """Per workload key with a tuned phase, the count of its records (in file order)
    measured before that phase began (the smallest ``tuned_from`` of its tasks)."""
    starts: dict[str, int] = {}
    for t in tasks_of(manifest):
        if t.tuned_from is not None:
            starts[t.workload_key] = min(t.tuned_from, starts.get(t.workload_key, t.tuned_from))
    return starts


