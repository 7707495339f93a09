"""The schedule trace's decisions as a fixed-length vector, and as a token beside the leaves.

TLP (Zhai et al., "TLP: A Deep Learning-based Cost Model for Tensor Program Tuning",
ASPLOS 2023, section 4) ranks schedules from their schedule-primitive sequence alone.
The compact AST sees the loop nest that those primitives produce; this module reads
the decisions themselves from a schedule trace (a tuning record's, or a MetaSchedule
``Schedule``'s), for the fit study's input check and ``trace`` lever
(:mod:`benchmarks.fit_study`) and for models trained with trace tokens
(:class:`cdmpp.model.ModelConfig` ``trace_tokens``, ``cdmpp train --trace-tokens``).

The vector (float32, :data:`TRACE_DIM` values) of one trace:

* the first :data:`TILES` ``SamplePerfectTile`` decisions, in trace order, each as the
  log2 of its up to 4 factors (missing factors and missing instructions: 0, the log2 of 1);
* the first 2 ``SampleCategorical`` decisions as ``log2(1 + chosen value)`` (the unroll
  depth of MetaSchedule's CPU rules);
* log2(1 + value) of the ``meta_schedule.parallel`` and ``meta_schedule.vectorize``
  annotations (the largest of each);
* counts of ``SamplePerfectTile``, ``Parallel``, ``Vectorize``, ``ComputeAt`` plus
  ``ReverseComputeAt``, ``CacheWrite`` and ``Fuse`` instructions.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.errors import InputError
from cdmpp.featurize.folder import measured_record_lines
from cdmpp.featurize.loops import with_loop_tokens
from cdmpp.records import label, read_workload_keys

TILES = 8
"""``SamplePerfectTile`` decisions kept per trace."""
_COUNTED = ("SamplePerfectTile", "Parallel", "Vectorize", ("ComputeAt", "ReverseComputeAt"), "CacheWrite", "Fuse")
_COUNTER = {name: c for c, names in enumerate(_COUNTED) for name in ((names,) if isinstance(names, str) else names)}
TRACE_DIM = 4 * TILES + 2 + 2 + len(_COUNTED)
"""Length of :func:`trace_vector`'s output."""


def trace_vector(trace_json: list) -> np.ndarray:
    """The decisions of one schedule trace as a vector (see the module docstring).

    Args:
        trace_json: a trace as a tuning record's JSON holds it: ``[instructions,
            decisions]``, each instruction ``[kind, inputs, attrs, outputs]``, each decision
            ``[instruction index, value]``.

    Returns:
        float32 ``(TRACE_DIM,)``.

    Raises:
        InputError: ``trace_json`` is not a trace in that form.
    """
    try:
        insts, decisions = trace_json
        decided = {int(i): d for i, d in decisions}
        out = np.zeros(TRACE_DIM, dtype=np.float32)
        tiles = cats = 0
        annot = {"meta_schedule.parallel": 0.0, "meta_schedule.vectorize": 0.0}
        counts = [0] * len(_COUNTED)
        for i, inst in enumerate(insts):
            kind = inst[0]
            if kind == "SamplePerfectTile" and tiles < TILES and i in decided:
                for j, f in enumerate(decided[i][:4]):
                    out[4 * tiles + j] = math.log2(max(1, int(f)))
                tiles += 1
            elif kind == "SampleCategorical" and cats < 2 and i in decided:
                value = inst[2][0][int(decided[i])]
                out[4 * TILES + cats] = math.log2(1 + max(0, int(value)))
                cats += 1
            elif kind == "Annotate":
                inputs, attrs = inst[1], inst[2]
                if attrs and attrs[0] in annot and isinstance(inputs[1], int):
                    annot[attrs[0]] = max(annot[attrs[0]], math.log2(1 + max(0, inputs[1])))
            c = _COUNTER.get(kind)
            if c is not None:
                counts[c] += 1
    except (TypeError, ValueError, IndexError, KeyError) as err:
        raise InputError(f"not a schedule trace in tuning-record JSON form: {err}") from err
    out[4 * TILES + 2], out[4 * TILES + 3] = annot["meta_schedule.parallel"], annot["meta_schedule.vectorize"]
    out[4 * TILES + 4:] = counts
    return out


def trace_matrix(device_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """Trace vectors of a device folder's measured programs, read as plain JSON.

    The records are those :func:`cdmpp.featurize.folder.measured_repeats` keeps, in file
    order, so row ``i`` belongs to program ``i`` of the folder's featurization.

    Returns:
        ``(float32 (P, TRACE_DIM) trace vectors, float64 (P,) latency in seconds)``; the
        latency (median of the repeats) lets a caller check the alignment.

    Raises:
        DatasetError: the folder lacks its record files.
        InputError: a record's trace is malformed.
    """
    return database_traces(*database_files(device_dir))


def database_files(device_dir: Path) -> tuple[Path, Path]:
    """A device folder's workload and record files (plain or gzipped).

    Raises:
        DatasetError: the folder lacks one of them.
    """
    return ds.database_files(device_dir)


def record_trace_rows(workload_file: Path, record_file: Path, read) -> tuple[list, np.ndarray]:
    """``read`` applied to the trace (tuning-record JSON form) of every measured record of a
    JSONDatabase, in the order its featurization keeps them
    (:func:`cdmpp.featurize.folder.measured_record_lines`), and float64 ``(P,)`` seconds
    (each record's median) to check the alignment with."""
    workloads = len(read_workload_keys(Path(workload_file), []))
    rows, latency = [], []
    for _, arr, record in measured_record_lines(Path(record_file), workloads):
        rows.append(read(record[0]))
        latency.append(label(arr))
    return rows, np.asarray(latency)


def check_lined_up(record_latency: np.ndarray, latency: np.ndarray) -> None:
    """Raise ``InputError`` unless the records' latencies equal the featurized programs' labels."""
    if np.shape(record_latency) != np.shape(latency) or not np.allclose(record_latency, latency, rtol=1e-9, atol=0):
        raise InputError("the records do not line up with the featurized programs; "
                         f"{np.size(record_latency)} records against {np.size(latency)} programs")


def database_traces(workload_file: Path, record_file: Path) -> tuple[np.ndarray, np.ndarray]:
    """:func:`trace_matrix` of any MetaSchedule JSONDatabase (its two files).

    Raises:
        InputError: a record's trace is malformed.
    """
    rows, latency = record_trace_rows(workload_file, record_file, trace_vector)
    return np.stack(rows) if rows else np.zeros((0, TRACE_DIM), np.float32), latency


def folder_traces(folders: Sequence[Path], latency: np.ndarray) -> np.ndarray:
    """float32 ``(P, TRACE_DIM)``: the trace vectors of the folders' programs, in the
    order of their featurization one folder after another (a corpus's program order).

    Args:
        folders: device folders, in the corpus's order.
        latency: float64 ``(P,)`` seconds, the featurized programs' labels: each record's
            median must equal its program's, or the records do not line up.

    Raises:
        InputError: the records do not line up with the programs (e.g. TVM rejected a
            record that the JSON kept), or a trace is malformed.
        DatasetError: a folder lacks its record files.
    """
    return lined_up([trace_matrix(f) for f in folders], latency)


def lined_up(parts: Sequence[tuple[np.ndarray, np.ndarray]], latency: np.ndarray) -> np.ndarray:
    """float32 ``(P, TRACE_DIM)``: the trace vectors of ``parts`` (``(traces, latency)`` of
    :func:`trace_matrix` or :func:`database_traces`, in order), checked against the
    featurized programs' labels ``latency`` (float64 ``(P,)`` seconds).

    Raises:
        InputError: the records do not line up with the programs.
    """
    mats, lats = zip(*parts) if parts else ((), ())
    check_lined_up(np.concatenate(lats) if lats else np.zeros(0), latency)
    return np.concatenate(mats) if mats else np.zeros((0, TRACE_DIM), np.float32)


def with_trace_tokens(data, traces: np.ndarray | None):
    """``data`` with each program's trace vector as one more token before its leaves.

    The fit study's ``trace`` levers: TLP's input (the schedule's decisions) beside the
    compact AST's leaves, in the same sequence, so the transformer attends across both.
    Every row gains ``TRACE_DIM + 1`` columns: a leaf row is its features followed by
    zeros; the trace token is zeros, the trace vector and a 1 (the token's flag), at
    position 0 (the root's, which no leaf has).

    A program whose trace row holds a NaN (or every program, with ``traces=None``) gets
    no token: its leaves only, in the wider columns.  That is how a checkpoint trained
    with trace dropout (:attr:`cdmpp.model.ModelConfig.trace_optional`) sees a bare
    PrimFunc.

    Args:
        data: :class:`cdmpp.featurize.batch.FeaturizedPrograms` with ``P`` programs and
            ``N`` leaf rows of ``F`` features.
        traces: float32 ``(P, TRACE_DIM)``, row ``i`` program ``i``'s
            (:func:`trace_matrix`), NaN rows for programs without a trace; or ``None``.

    Returns:
        A copy with ``x`` float32 ``(N + T, F + TRACE_DIM + 1)`` (``T`` programs with a
        trace), ``pos`` and ``ptr`` to match; labels, workloads and devices unchanged.

    Raises:
        InputError: ``traces`` is not ``(P, TRACE_DIM)``.
    """

    p, n, f = len(data), data.x.shape[0], data.x.shape[1]
    if traces is None:
        traces = np.full((p, TRACE_DIM), np.nan, dtype=np.float32)
    traces = np.asarray(traces, dtype=np.float32)
    if traces.shape != (p, TRACE_DIM):
        raise InputError(f"traces of shape {traces.shape}, expected ({p}, {TRACE_DIM})")
    has = ~np.isnan(traces).any(axis=1)
    counts = np.diff(data.ptr)
    before = np.concatenate([[0], np.cumsum(has)])  # tokens up to and including each program's
    ptr = data.ptr + before
    # each leaf moves down past the tokens of its own program and the ones before it
    leaf_rows = np.arange(n) + np.repeat(before[1:], counts)
    x = np.zeros((n + int(has.sum()), f + TRACE_DIM + 1), dtype=np.float32)
    x[leaf_rows, :f] = data.x
    token_rows = ptr[:-1][has]
    x[token_rows, f:f + TRACE_DIM] = traces[has]
    x[token_rows, -1] = 1.0
    pos = np.zeros(len(x), dtype=data.pos.dtype)
    pos[leaf_rows] = data.pos
    return dataclasses.replace(data, x=x, pos=pos, ptr=ptr.astype(data.ptr.dtype))


def model_inputs(config, data, folders: Sequence[Path] | None = None, traces: bool = True):
    """``data`` in the input columns of a model with ``config``
    (:class:`cdmpp.model.ModelConfig`).

    A model with loop tokens (``config.loop_tokens``) gets each program's loops among its
    leaves first (:func:`cdmpp.featurize.loops.with_loop_tokens`; ``data`` must keep
    them).  A leaves-only model gets ``data`` unchanged.  A model trained with trace tokens gets
    each program's token, its trace read from the tuning records of ``folders`` (the
    device folders that ``data`` was featurized from, in order; :func:`folder_traces`),
    or, with ``traces=False``, no token at all (bare PrimFuncs; a ``trace_optional``
    model only).

    Raises:
        InputError: a trace-token model and no ``folders``, or ``traces=False`` for a
            model that needs the trace, or records that do not line up with ``data``, or a
            loop-token model and ``data`` without its loops.
    """
    if getattr(config, "loop_tokens", False):
        data = with_loop_tokens(data)
    if not config.trace_tokens:
        return data
    if not traces:
        if not config.trace_optional:
            raise InputError("this checkpoint was trained with trace tokens and no trace dropout: it cannot predict "
                             "programs without their schedule traces")
        return with_trace_tokens(data, None)
    if not folders:
        raise InputError("this checkpoint reads schedule traces: it needs the device folders whose tuning records "
                         "hold them")
    return with_trace_tokens(data, folder_traces(list(folders), data.latency))


def schedule_trace_json(trace) -> list:
    """A MetaSchedule ``Trace`` (e.g. ``Schedule.trace``) in the JSON form a tuning record
    holds (``[instructions, decisions]`` of plain Python lists, strings and numbers), the
    input of :func:`trace_vector`."""

    def plain(o):
        if o is None or isinstance(o, (bool, int, float, str)):
            return o
        if hasattr(o, "items"):
            return {str(k): plain(v) for k, v in o.items()}
        if hasattr(o, "value") and not hasattr(o, "__iter__"):
            return o.value
        try:
            return [plain(x) for x in o]
        except TypeError:
            return str(o)

    return plain(trace.as_json())


def _plain(o):
    """An FFI integer, string or array as a Python one (IntImm -> int)."""
    if o is None or isinstance(o, (bool, int, float, str)):
        return o
    value = getattr(o, "value", None)
    if isinstance(value, (int, float, str)):
        return value
    if hasattr(o, "__len__") and not isinstance(o, str):
        return [_plain(x) for x in o]
    return str(o)


_KIND_NAMES: dict[int, str] = {}
"""Name of each MetaSchedule instruction kind by its object's handle."""
_KIND_OBJECTS: list = []  # the kinds named in _KIND_NAMES, held so that their handles stay theirs
_NONE: list = []  # the empty inputs, attributes and outputs of the instructions read by kind alone (never changed)


def trace_decisions(trace) -> list:
    """The parts of a MetaSchedule ``Trace`` that :func:`trace_vector` reads, in its JSON
    form (``[instructions, decisions]``): every instruction's kind, and the inputs,
    attributes and decision of the sampling and annotation instructions only.  The same
    vector as :func:`schedule_trace_json` gives, without converting every block and loop
    operand of every instruction."""
    insts, decisions = [], []
    for i, inst in enumerate(trace.insts[:]):  # a slice converts the FFI array in one go
        kind_obj = inst.kind
        kind = _KIND_NAMES.get(kind_obj.__chandle__())
        if kind is None:  # instruction kinds are registered once per process: their handles are stable
            kind = _KIND_NAMES[kind_obj.__chandle__()] = str(kind_obj.name)
            _KIND_OBJECTS.append(kind_obj)
        if kind == "Annotate":  # [loop or block, value], [annotation key]
            inputs = inst.inputs[:]
            insts.append([kind, [None, _plain(inputs[1]) if len(inputs) > 1 else None], [str(inst.attrs[0])], []])
            continue
        if kind == "SampleCategorical":  # its candidates are an attribute, its decision an index into them
            insts.append([kind, [], [_plain(inst.attrs[0])], []])
        else:
            insts.append([kind, _NONE, _NONE, _NONE])
        if kind in ("SamplePerfectTile", "SampleCategorical"):
            decision = trace.get_decision(inst)
            if decision is not None:
                decisions.append([i, _plain(decision)])
    return [insts, decisions]


def schedule_trace_vectors(schedules, allow_missing: bool = False) -> np.ndarray:
    """float32 ``(len(schedules), TRACE_DIM)``: :func:`trace_vector` of each MetaSchedule
    ``Schedule``'s (or tuning record's) trace.

    Args:
        allow_missing: an input without a trace (a bare PrimFunc or IRModule, or a
            ``Schedule`` whose trace holds no instruction) gets a NaN row, which
            :func:`with_trace_tokens` reads as "no token", instead of an error.

    Raises:
        InputError: an input has no trace and ``allow_missing`` is false.
    """
    rows = []
    for sch in schedules:
        trace = getattr(sch, "trace", None)
        if trace is not None and not len(getattr(trace, "insts", ())):  # Schedule(mod) of a program scheduled elsewhere
            trace = None
        if trace is None and allow_missing:
            rows.append(np.full(TRACE_DIM, np.nan, dtype=np.float32))
            continue
        if trace is None:
            raise InputError("a program without a schedule trace (a PrimFunc or IRModule, or a Schedule built "
                             "without tracing): this checkpoint was trained with trace tokens and no trace dropout, "
                             "so it needs each program's Schedule or tuning record")
        rows.append(trace_vector(trace_decisions(trace)))
    return np.stack(rows) if rows else np.zeros((0, TRACE_DIM), np.float32)
