"""The schedule trace's decisions: as a vector, in the fit study's input check, and as a token of a checkpoint."""

import numpy as np
import pytest

from cdmpp.errors import InputError
from cdmpp.featurize.trace import TRACE_DIM, trace_vector


def test_input_check_lines_up_with_the_featurized_programs_and_fits_the_residual(tiny_collection, tiny_featurized):
    from benchmarks.fit_study import residual_rows
    from cdmpp.featurize.trace import folder_traces

    _, data = tiny_featurized
    folder = [tiny_collection[1].device_dir]
    traces = folder_traces(folder, data.latency)
    assert traces.shape == (len(data), TRACE_DIM) and traces.any(axis=1).all()
    with pytest.raises(InputError, match="do not line up"):
        folder_traces(folder, data.latency[:-1])
    every = np.arange(len(data))
    index = {"fit": every, "validation": every}
    pred = {part: 2.0 * data.latency[idx] for part, idx in index.items()}  # twice too slow everywhere
    corrected = residual_rows(pred, data, {"trace": traces}, index)["trace"]
    ratio = corrected["validation"] / data.latency
    assert np.all(np.abs(np.log(ratio)) < 0.1 * np.log(2.0))  # the constant bias is learnt

def test_trace_tokens_go_before_each_programs_leaves(tiny_collection, tiny_featurized):
    from cdmpp.featurize.batch import dense_programs
    from cdmpp.featurize.trace import folder_traces, with_trace_tokens

    _, data = tiny_featurized
    traces = folder_traces([tiny_collection[1].device_dir], data.latency)
    out = with_trace_tokens(data, traces)
    f = data.x.shape[1]
    assert out.x.shape == (data.x.shape[0] + len(data), f + TRACE_DIM + 1)
    every = np.arange(len(data))
    x0, p0, m0 = dense_programs(data, every)
    x1, p1, m1 = dense_programs(out, every)
    for k in every:
        n = int(m0[k].sum())
        assert int(m1[k].sum()) == n + 1
        assert np.array_equal(x1[k, 1:n + 1, :f].numpy(), x0[k, :n].numpy()) and not x1[k, 1:n + 1, f:].any()
        assert np.array_equal(x1[k, 0, f:f + TRACE_DIM].numpy(), traces[k]) and x1[k, 0, -1] == 1
        assert not x1[k, 0, :f].any() and p1[k, 0] == 0 and np.array_equal(p1[k, 1:n + 1], p0[k, :n])
    assert np.array_equal(out.latency, data.latency) and np.array_equal(out.workload, data.workload)
    with pytest.raises(InputError, match="traces of shape"):
        with_trace_tokens(data, traces[:-1])

def test_trace_tokens_take_no_pooled_device_and_no_cmd_target(tiny_collection, tmp_path):
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    folder = tiny_collection[1].device_dir
    with pytest.raises(InputError, match="trace tokens take no pooled devices"):
        train(TrainData([folder], "dcgan-b1", pool=[folder]), tmp_path / "x",
              ModelConfig(trace_tokens=True, loop_tokens=False), use_wandb=False, progress=False)
    with pytest.raises(InputError, match="trace tokens take no pooled devices"):
        train(TrainData([folder], "dcgan-b1", cmd_target=folder), tmp_path / "x",
              ModelConfig(trace_tokens=True, loop_tokens=False), TrainConfig(cmd_weight=0.5), use_wandb=False, progress=False)
    assert not (tmp_path / "x").exists()

def test_a_program_without_a_trace_gets_no_token_and_trace_dropout_masks_only_tokens(tiny_collection,
                                                                                     tiny_featurized):
    import torch

    from cdmpp.featurize.batch import dense_programs
    from cdmpp.featurize.trace import folder_traces, with_trace_tokens
    from cdmpp.train.losses import drop_trace_tokens

    _, data = tiny_featurized
    traces = folder_traces([tiny_collection[1].device_dir], data.latency)
    some = traces.copy()
    some[::2] = np.nan  # every other program is a bare PrimFunc
    mixed, full, bare = with_trace_tokens(data, some), with_trace_tokens(data, traces), with_trace_tokens(data, None)
    every = np.arange(len(data))
    assert bare.x.shape == (data.x.shape[0], full.x.shape[1]) and not bare.x[:, data.x.shape[1]:].any()
    assert mixed.x.shape[0] == data.x.shape[0] + len(data) // 2
    xm, pm, mm = dense_programs(mixed, every)
    for k in every:  # odd programs are as with every trace, even ones as with none
        ref = dense_programs(bare if k % 2 == 0 else full, np.array([k]))
        n = int(ref[2][0].sum())
        assert int(mm[k].sum()) == n and torch.equal(xm[k, :n], ref[0][0, :n]) and torch.equal(pm[k, :n], ref[1][0, :n])
    x, _, mask = dense_programs(full, every)
    assert torch.equal(drop_trace_tokens(x, mask, 0.0), mask)
    dropped = drop_trace_tokens(x, mask, 0.999999)
    several = mask[:, 1]  # a program with at least one leaf loses its token, and only that
    assert not dropped[several, 0].any() and torch.equal(dropped[:, 1:], mask[:, 1:])
    assert torch.equal(dropped[~several, 0], mask[~several, 0])

def test_the_trace_is_read_without_converting_it_whole_and_gives_the_same_vector(tiny_collection):
    """``trace_decisions`` reads only what the vector needs; the vector equals the one of
    the whole trace in tuning-record JSON form, for every record of the folder."""
    from cdmpp import dataset as ds
    from cdmpp.featurize.trace import schedule_trace_json, schedule_trace_vectors, trace_decisions

    _, summary = tiny_collection
    records = [p.record for p in ds.load_device_dir(summary.device_dir).programs]
    whole = np.stack([trace_vector(schedule_trace_json(r.trace)) for r in records])
    np.testing.assert_array_equal(schedule_trace_vectors(records), whole)
    assert np.count_nonzero(whole) >= 2 * len(records)  # decisions and counts are there: real values compared
    first = trace_decisions(records[0].trace)
    assert len(first[0]) == len(records[0].trace.insts) and all(len(i) == 4 for i in first[0])
