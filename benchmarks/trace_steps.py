"""The whole schedule trace as a sequence: one token per schedule instruction.

TLP (Zhai et al., "TLP: A Deep Learning-based Cost Model for Tensor Program Tuning",
ASPLOS 2023, section 4) reads a program as the sequence of its schedule primitives, each
embedded with its kind and its arguments, and learns latency from that sequence alone.
:mod:`cdmpp.featurize.trace` summarises a trace in one vector (the first tile decisions
and a few counts); this module keeps every instruction in order, each as a token of
:data:`STEP_DIM` features, for the fit study's ``trace-sequence`` levers
(:mod:`benchmarks.fit_study`), where the tokens sit before the program's leaves in the
transformer's sequence.

The look-up instructions (``GetSBlock``, ``GetLoops``, ``GetChildBlocks``,
``GetProducers``, ``GetConsumers``) decide nothing and are left out; the first
:data:`MAX_STEPS` of the others are kept.  One step's features:

* the instruction kind, one-hot over :data:`STEP_KINDS` (the last column: any other kind);
* ``SamplePerfectTile``: log2 of its up to 4 tile factors, and log2(1 + factor count);
* ``SampleCategorical``: log2(1 + the chosen candidate's value);
* ``SampleComputeLocation``: log2(3 + the chosen location) (-2 inlines, -1 is the root);
* ``Annotate``: the annotation key, one-hot over :data:`ANNOTATION_KEYS` (last: another key),
  and log2(1 + its value) when the value is an integer;
* log2(1 + operands) of every instruction (a ``Split``'s factors, a ``Fuse``'s loops);
* whether the instruction has a decision; its place in the kept sequence as ``i / MAX_STEPS``
  and log2(1 + i).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cdmpp.errors import InputError
from cdmpp.featurize.trace import check_lined_up, database_files, record_trace_rows

MAX_STEPS = 64
"""Instructions kept per trace (the look-ups left out first); a longer trace is cut."""
LOOKUPS = frozenset(("GetSBlock", "GetBlock", "GetLoops", "GetChildBlocks", "GetProducers", "GetConsumers"))
"""Instruction kinds that only look up blocks and loops: not steps."""
STEP_KINDS = (
    "SamplePerfectTile", "SampleCategorical", "SampleComputeLocation", "Split", "Fuse", "Reorder", "Parallel",
    "Vectorize", "Unroll", "Bind", "CacheRead", "CacheWrite", "ComputeAt", "ReverseComputeAt", "ComputeInline",
    "ReverseComputeInline", "DecomposeReduction", "RFactor", "Annotate", "Unannotate", "EnterPostproc",
    "StorageAlign", "SetScope", "TransformLayout", "Blockize", "Tensorize", "PadEinsum", "AddUnitLoop",
)
"""The instruction kinds with a column of their own; others share the column after them."""
ANNOTATION_KEYS = (
    "meta_schedule.parallel", "meta_schedule.vectorize", "meta_schedule.unroll_explicit",
    "meta_schedule.unroll_implicit", "meta_schedule.tiling_structure", "pragma_auto_unroll_max_step",
    "pragma_unroll_explicit",
)
"""The annotation keys with a column of their own; others share the column after them."""
_KIND = {k: i for i, k in enumerate(STEP_KINDS)}
_KEY = {k: i for i, k in enumerate(ANNOTATION_KEYS)}
_TILE = len(STEP_KINDS) + 1  # 4 tile factors, then the factor count
_CAT = _TILE + 5
_LOCATION = _CAT + 1
_ANN = _LOCATION + 1  # the annotation keys, then the value
_OPERANDS = _ANN + len(ANNOTATION_KEYS) + 2
_DECIDED = _OPERANDS + 1
_ORDER = _DECIDED + 1
STEP_DIM = _ORDER + 2
"""Features of one step (see the module docstring)."""


def trace_steps(trace_json: list) -> np.ndarray:
    """The steps of one schedule trace, in trace order.

    Args:
        trace_json: a trace as a tuning record's JSON holds it: ``[instructions, decisions]``,
            each instruction ``[kind, inputs, attrs, outputs]``, each decision
            ``[instruction index, value]``.

    Returns:
        float32 ``(S, STEP_DIM)``, ``S <= MAX_STEPS`` (0 for a trace of look-ups only).

    Raises:
        InputError: ``trace_json`` is not a trace in that form.
    """
    # pylint: disable=too-many-branches
    try:
        insts, decisions = trace_json
        decided = {int(i): d for i, d in decisions}
        rows = []
        for i, inst in enumerate(insts):
            kind, inputs, attrs = inst[0], inst[1], inst[2]
            if kind in LOOKUPS:
                continue
            if len(rows) == MAX_STEPS:
                break
            row = np.zeros(STEP_DIM, dtype=np.float32)
            row[_KIND.get(kind, len(STEP_KINDS))] = 1.0
            decision = decided.get(i)
            if kind == "SamplePerfectTile" and decision is not None:
                for j, f in enumerate(decision[:4]):
                    row[_TILE + j] = math.log2(max(1, int(f)))
                row[_TILE + 4] = math.log2(1 + len(decision))
            elif kind == "SampleCategorical" and decision is not None:
                row[_CAT] = math.log2(1 + max(0, int(attrs[0][int(decision)])))
            elif kind == "SampleComputeLocation" and decision is not None:
                row[_LOCATION] = math.log2(3 + max(-2, int(decision)))
            elif kind == "Annotate" and attrs:
                row[_ANN + _KEY.get(attrs[0], len(ANNOTATION_KEYS))] = 1.0
                value = inputs[1] if len(inputs) > 1 else None
                if isinstance(value, int) and not isinstance(value, bool):
                    row[_ANN + len(ANNOTATION_KEYS) + 1] = math.log2(1 + max(0, value))
            row[_OPERANDS] = math.log2(1 + len(inputs))
            row[_DECIDED] = float(decision is not None)
            row[_ORDER] = len(rows) / MAX_STEPS
            row[_ORDER + 1] = math.log2(1 + len(rows))
            rows.append(row)
    except (TypeError, ValueError, IndexError, KeyError) as err:
        raise InputError(f"not a schedule trace in tuning-record JSON form: {err}") from err
    return np.stack(rows) if rows else np.zeros((0, STEP_DIM), np.float32)


def folder_trace_steps(folders: Sequence[Path], latency: np.ndarray) -> list[np.ndarray]:
    """The steps of the device folders' programs, in the order of their featurization one
    folder after another (a corpus's program order).

    Args:
        folders: device folders, in the corpus's order.
        latency: float64 ``(P,)`` seconds, the featurized programs' labels: each record's
            median must equal its program's, or the records do not line up.

    Returns:
        ``P`` float32 arrays ``(S_i, STEP_DIM)``.

    Raises:
        InputError: the records do not line up with the programs, or a trace is malformed.
        DatasetError: a folder lacks its record files.
    """
    steps, lats = [], []
    for folder in folders:
        s, lat = record_trace_rows(*database_files(folder), trace_steps)
        steps += s
        lats.append(lat)
    check_lined_up(np.concatenate(lats) if lats else np.zeros(0), latency)
    return steps


def with_trace_sequence(data, steps: Sequence[np.ndarray]):
    """``data`` with each program's trace steps as tokens before its leaves.

    Every row gains ``STEP_DIM + 1`` columns: a leaf row is its features followed by
    zeros; a step token is zeros, the step's features and a 1 (the step flag).  The steps
    take position 0 (the root's, which no leaf has); their order is in their own features.

    Args:
        data: :class:`cdmpp.featurize.batch.FeaturizedPrograms` with ``P`` programs and
            ``N`` rows of ``F`` features (leaves, and loop tokens when merged first).
        steps: ``P`` float32 arrays ``(S_i, STEP_DIM)`` (:func:`folder_trace_steps`);
            ``S_i = 0``: a program without a trace.

    Returns:
        A copy with ``x`` float32 ``(N + sum S_i, F + STEP_DIM + 1)``, ``pos`` and ``ptr``
        to match; labels, workloads and devices unchanged.

    Raises:
        InputError: ``steps`` does not hold ``P`` arrays of ``STEP_DIM`` columns.
    """
    p, n, f = len(data), data.x.shape[0], data.x.shape[1]
    if len(steps) != p:
        raise InputError(f"trace steps of {len(steps)} programs, expected {p}")
    bad = [i for i, s in enumerate(steps) if np.ndim(s) != 2 or np.shape(s)[1] != STEP_DIM]
    if bad:
        raise InputError(f"program {bad[0]}'s trace steps have shape {np.shape(steps[bad[0]])}, "
                         f"expected (S, {STEP_DIM})")
    counts = np.asarray([len(s) for s in steps], dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(counts)])  # step tokens up to and including each program's
    ptr = data.ptr + before
    leaves = np.diff(data.ptr)
    leaf_rows = np.arange(n) + np.repeat(before[1:], leaves)
    x = np.zeros((n + int(before[-1]), f + STEP_DIM + 1), dtype=np.float32)
    x[leaf_rows, :f] = data.x
    if before[-1]:
        # program i's steps fill the rows ptr[i] .. ptr[i] + S_i - 1
        step_rows = np.repeat(ptr[:-1], counts) + (np.arange(int(before[-1])) - np.repeat(before[:-1], counts))
        x[step_rows, f:f + STEP_DIM] = np.concatenate([s for s in steps if len(s)])
        x[step_rows, -1] = 1.0
    pos = np.zeros(len(x), dtype=data.pos.dtype)
    pos[leaf_rows] = data.pos
    return dataclasses.replace(data, x=x, pos=pos, ptr=ptr.astype(data.ptr.dtype))
