"""The whole schedule trace as a sequence of step tokens (the fit study's trace-sequence levers)."""

import numpy as np
import pytest

from benchmarks.trace_steps import (
    ANNOTATION_KEYS,
    MAX_STEPS,
    STEP_DIM,
    STEP_KINDS,
    trace_steps,
)
from cdmpp.errors import InputError

TRACE = [
    [
        ["GetSBlock", [], ["main", "C"], ["b0"]],
        ["GetLoops", ["b0"], [], ["l1", "l2"]],
        ["SamplePerfectTile", ["l1"], [4, 64], ["v1", "v2", "v3", "v4"]],
        ["Split", ["l1", "v1", "v2", "v3", "v4"], [1, 0], ["l5", "l6", "l7", "l8"]],
        ["Annotate", ["b0", 32], ["meta_schedule.parallel"], []],
        ["SampleCategorical", [], [[0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25]], ["v7"]],
        ["SampleComputeLocation", ["b0"], [], ["l9"]],
        ["Annotate", ["b0", "v7"], ["meta_schedule.unroll_explicit"], []],
        ["MysteryKind", [], [], []],
    ],
    [[2, [2, 4, 1, 8]], [5, 2], [6, -1]],
]

def test_each_instruction_but_the_look_ups_is_a_step_with_its_decision():
    s = trace_steps(TRACE)
    assert s.shape == (7, STEP_DIM) and s.dtype == np.float32
    kinds = len(STEP_KINDS) + 1
    assert np.array_equal(s[:, :kinds].sum(axis=1), np.ones(7))  # one kind each
    names = ["SamplePerfectTile", "Split", "Annotate", "SampleCategorical", "SampleComputeLocation", "Annotate"]
    for row, name in zip(s, names):
        assert row[STEP_KINDS.index(name)] == 1
    assert s[6, len(STEP_KINDS)] == 1  # an unknown kind: the last kind column
    tile = kinds
    assert list(s[0, tile:tile + 4]) == [1, 2, 0, 3] and s[0, tile + 4] == pytest.approx(np.log2(5))
    assert s[3, tile + 5] == pytest.approx(np.log2(65))  # the categorical's chosen value, 64
    assert s[4, tile + 6] == pytest.approx(np.log2(2))  # compute location -1 (the root)
    ann = tile + 7
    assert s[2, ann + ANNOTATION_KEYS.index("meta_schedule.parallel")] == 1
    assert s[2, ann + len(ANNOTATION_KEYS) + 1] == pytest.approx(np.log2(33))
    assert s[5, ann + ANNOTATION_KEYS.index("meta_schedule.unroll_explicit")] == 1
    assert s[5, ann + len(ANNOTATION_KEYS) + 1] == 0  # its value is a sampled variable, not a number
    decided = ann + len(ANNOTATION_KEYS) + 3
    assert list(s[:, decided]) == [1, 0, 0, 1, 1, 0, 0]
    assert list(s[:, -1]) == pytest.approx(list(np.log2(1 + np.arange(7))))  # the place in the sequence
    with pytest.raises(InputError, match="not a schedule trace"):
        trace_steps([["Split"]])

def test_a_long_trace_is_cut_after_max_steps():
    insts = [["Fuse", ["l0", "l1"], [], ["l2"]]] * (MAX_STEPS + 10)
    assert trace_steps([insts, []]).shape == (MAX_STEPS, STEP_DIM)
    assert trace_steps([[["GetSBlock", [], [], []]], []]).shape == (0, STEP_DIM)
