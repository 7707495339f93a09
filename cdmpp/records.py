"""The MetaSchedule JSONDatabase line formats, decoded in one place (JSON only, no TVM).

A JSONDatabase is two JSON-lines files (TVM ``meta_schedule/database/json_database.cc``):

- the workload file: one line per workload, ``[structural hash, IRModule JSON]``;
- the tuning-record file: one line per measured (or failed) program,
  ``[workload index, [trace, run_secs, target, args_info]]``: the line of its workload
  in the workload file (0-based), the schedule trace's JSON, every timing repeat in
  seconds (``null`` for a failed build or run), the target and the arguments' info.

The label of a program is the median of its repeats (:func:`label`), over repeats that
are a measurement (:func:`valid_run_secs`).  Every reader of these files in cdmpp and in
``benchmarks/`` goes through :func:`read_records` and :func:`read_workload_keys`.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import InputError


@dataclass
class BadLine:
    """A line of a dataset file that could not be parsed.

    Attributes:
        path: the file.
        lineno: 1-based line number.
        error: what is wrong with it.
        text: its first 200 characters.
    """

    path: str
    lineno: int
    error: str
    text: str


def open_text(path: Path) -> io.TextIOBase:
    """Open a plain or gzip text file for reading (by the ``.gz`` suffix)."""
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_json_lines(path: Path, bad: list[BadLine] | None = None) -> Iterator[tuple[int, object]]:
    """Yield ``(lineno, parsed)`` for every JSON line of a file (1-based line numbers).

    Corrupt or truncated lines are skipped and, when ``bad`` is given, appended to it;
    the lines after them are still read.
    """
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as err:
                if bad is not None:
                    bad.append(BadLine(str(path), lineno, f"invalid JSON: {err.msg}", line[:200]))


def valid_run_secs(run_secs) -> np.ndarray | None:
    """A record's repeats (seconds) as a float64 array of shape ``(repeats,)``, or ``None``
    when they are no measurement: missing, empty, non-finite, non-positive, or
    MetaSchedule's 1e10 of a failed run.  The one validity rule of a measurement.

    Raises:
        TypeError, ValueError: a repeat that is not a number.
    """
    if run_secs is None:
        return None
    secs = np.array([float(s) for s in run_secs], dtype=np.float64)
    if secs.size == 0 or not np.all(np.isfinite(secs)) or np.any(secs <= 0) or np.any(secs >= 1e9):
        return None
    return secs


def label(run_secs: np.ndarray) -> float:
    """A program's latency label in seconds: the median of its valid repeats."""
    return float(np.median(run_secs))


def trace_key(trace_json) -> str:
    """A schedule trace's JSON as text, booleans written as 0 and 1 (TVM's own writer does;
    a trace's ``as_json`` in Python gives ``true``/``false``): the key that joins one
    program's records of two protocols (cold and warm)."""

    def norm(x):
        if isinstance(x, bool):
            return int(x)
        return [norm(v) for v in x] if isinstance(x, list) else x

    return json.dumps(norm(trace_json), separators=(",", ":"))


@dataclass(frozen=True)
class RecordLine:
    """One decoded line of a tuning-record file.

    Attributes:
        lineno: 1-based line number in its file.
        workload_index: the line of its workload in the workload file (0-based).
        trace: the schedule trace's JSON.
        run_secs: float64 ``(repeats,)``, seconds, or ``None`` when the line holds no
            measurement (a failed build or run).
        record: the record's JSON, ``[trace, run_secs, target, args_info]``, as
            ``tvm.s_tir.meta_schedule.database.TuningRecord.from_json`` takes it.
    """

    lineno: int
    workload_index: int
    trace: list
    run_secs: np.ndarray | None
    record: list

    @property
    def label(self) -> float | None:
        """Seconds: the median of the repeats (:func:`label`), ``None`` without a measurement."""
        return None if self.run_secs is None else label(self.run_secs)


def decode_record(obj, lineno: int = 0, n_workloads: int | None = None) -> RecordLine:
    """Decode one parsed tuning-record line.

    Args:
        obj: the parsed line.
        lineno: its line number, kept in the result.
        n_workloads: the workload file's line count; a workload index beyond it is an error.

    Raises:
        ValueError: the line is not ``[workload index, [trace, run_secs, ...]]``, or its
            workload index is out of range (the message names what is wrong).
    """
    if not isinstance(obj, list) or len(obj) != 2:
        raise ValueError("a tuning record is [workload index, [trace, run_secs, target, args_info]]")
    try:
        widx = int(obj[0])
    except (TypeError, ValueError):
        raise ValueError(f"workload index {obj[0]!r} is not an integer") from None
    if widx < 0:
        raise ValueError(f"workload index {widx} is negative")
    if n_workloads is not None and widx >= n_workloads:
        raise ValueError(f"workload index {widx} out of range ({n_workloads} workloads)")
    if not isinstance(obj[1], list) or not obj[1]:
        raise ValueError("a tuning record is [workload index, [trace, run_secs, target, args_info]]")
    try:
        secs = valid_run_secs(obj[1][1] if len(obj[1]) > 1 else None)
    except (TypeError, ValueError):
        raise ValueError(f"run_secs {str(obj[1][1])[:80]} are not numbers") from None
    return RecordLine(lineno, widx, obj[1][0], secs, obj[1])


def read_records(path: Path, bad: list[BadLine] | None = None, n_workloads: int | None = None,
                 measured: bool = False) -> Iterator[RecordLine]:
    """Every tuning record of a record file (plain or gzipped), decoded, in file order.

    Args:
        path: a tuning-record file.
        bad: where a corrupt line goes (it is skipped either way).
        n_workloads: the workload file's line count; a record whose workload index is
            beyond it is a bad line.
        measured: yield only records with a valid measurement.
    """
    for lineno, obj in iter_json_lines(path, bad):
        try:
            rec = decode_record(obj, lineno, n_workloads)
        except ValueError as err:
            if bad is not None:
                bad.append(BadLine(str(path), lineno, f"bad tuning record: {err}"[:300], str(obj)[:200]))
            continue
        if measured and rec.run_secs is None:
            continue
        yield rec


def read_workload_lines(path: Path, bad: list[BadLine] | None = None) -> Iterator[tuple[int, str, list]]:
    """``(lineno, structural hash, line JSON)`` of every workload line, in file order (the
    line JSON is what ``Workload.from_json`` takes).  A line that is not ``[hash, module]``
    goes to ``bad`` and is skipped."""
    for lineno, obj in iter_json_lines(path, bad):
        if not isinstance(obj, list) or len(obj) != 2:
            if bad is not None:
                bad.append(BadLine(str(path), lineno, "bad workload: not [structural hash, IRModule JSON]",
                                   str(obj)[:200]))
            continue
        yield lineno, str(obj[0]), obj


def read_workload_keys(path: Path, bad: list[BadLine] | None = None) -> list[str]:
    """The structural hash of every workload line, in file order (index = workload index)."""
    return [key for _, key, _ in read_workload_lines(path, bad)]


def to_tuning_record(line: RecordLine, workload):
    """The MetaSchedule ``TuningRecord`` of a decoded line, on its ``Workload``.

    Raises:
        tvm.error.TVMError (and the like): TVM cannot build the record (a trace that does
            not apply to the workload, say).
    """
    from .tvm_compat import TuningRecord  # noqa: PLC0415  (keeps tvm, tvm_ffi off the JSON reader's import)

    return TuningRecord.from_json(line.record, workload)


def parse_record(obj, workloads: list, where: str) -> tuple[int, object, float | None]:
    """One parsed tuning-record line as ``(workload index, TuningRecord, label in seconds)``;
    the label is ``None`` for a record without a measurement.

    Args:
        obj: the parsed line.
        workloads: the database's ``Workload`` objects, by workload index.
        where: how an error names the line (``"file:lineno"``).

    Raises:
        InputError: a malformed line, or one TVM cannot build; the message starts with ``where``.
    """
    try:
        line = decode_record(obj)
        if line.workload_index >= len(workloads):
            raise ValueError(f"workload index {line.workload_index}, the database has {len(workloads)} workloads")
        rec = to_tuning_record(line, workloads[line.workload_index])
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise InputError(f"{where}: not a MetaSchedule tuning record: {str(err).strip()[:200]}") from err
    return line.workload_index, rec, line.label
