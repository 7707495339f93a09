"""The whole schedule trace as a sequence of step tokens (the fit study's trace-sequence levers)."""

import numpy as np
import pytest

from benchmarks.trace_steps import (
    STEP_DIM,
    with_trace_sequence,
)
from cdmpp.errors import InputError


def test_step_tokens_go_before_each_programs_leaves(tiny_collection, tiny_featurized):
    from benchmarks.trace_steps import folder_trace_steps
    from cdmpp.featurize.batch import dense_programs

    _, data = tiny_featurized
    folder = [tiny_collection[1].device_dir]
    steps = folder_trace_steps(folder, data.latency)
    assert len(steps) == len(data) and all(len(s) > 0 for s in steps)
    with pytest.raises(InputError, match="do not line up"):
        folder_trace_steps(folder, data.latency[:-1])
    steps[1] = steps[1][:0]  # a program without a trace keeps its leaves alone
    out = with_trace_sequence(data, steps)
    f = data.x.shape[1]
    total = sum(len(s) for s in steps)
    assert out.x.shape == (data.x.shape[0] + total, f + STEP_DIM + 1)
    every = np.arange(len(data))
    x0, p0, m0 = dense_programs(data, every)
    x1, p1, m1 = dense_programs(out, every)
    for k in every:
        n, t = int(m0[k].sum()), len(steps[k])
        assert int(m1[k].sum()) == n + t
        assert np.array_equal(x1[k, :t, f:f + STEP_DIM].numpy(), steps[k]) and (x1[k, :t, -1] == 1).all()
        assert not x1[k, :t, :f].any() and not p1[k, :t].any()
        assert np.array_equal(x1[k, t:t + n, :f].numpy(), x0[k, :n].numpy()) and not x1[k, t:t + n, f:].any()
        assert np.array_equal(p1[k, t:t + n], p0[k, :n])
    assert np.array_equal(out.latency, data.latency) and np.array_equal(out.workload, data.workload)
    with pytest.raises(InputError, match="of 2 programs"):
        with_trace_sequence(data, steps[:2])
    with pytest.raises(InputError, match="shape"):
        with_trace_sequence(data, [np.zeros((1, 3), np.float32)] * len(data))
