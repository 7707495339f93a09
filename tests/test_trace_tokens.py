"""The schedule trace's decisions: as a vector, in the fit study's input check, and as a token of a checkpoint."""

import numpy as np
import pytest

from cdmpp.featurize.trace import TILES, TRACE_DIM, trace_vector
from cdmpp.errors import InputError

TRACE = [
    [
        ["GetSBlock", [], ["main", "C"], ["b0"]],
        ["SamplePerfectTile", ["l1"], [4, 64], ["v1", "v2", "v3", "v4"]],
        ["SamplePerfectTile", ["l2"], [2, 64], ["v5", "v6"]],
        ["Annotate", ["b0", 32], ["meta_schedule.parallel"], []],
        ["Annotate", ["b0", 64], ["meta_schedule.vectorize"], []],
        ["SampleCategorical", [], [[0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25]], ["v7"]],
        ["Parallel", ["l8"], [], []],
        ["ReverseComputeAt", ["b9", "l8"], [], []],
    ],
    [[1, [2, 4, 1, 8]], [2, [16, 4]], [5, 2]],
]


def test_trace_vector_reads_tiles_unroll_annotations_and_counts():
    v = trace_vector(TRACE)
    assert v.shape == (TRACE_DIM,) and v.dtype == np.float32
    assert list(v[:4]) == [1, 2, 0, 3] and list(v[4:8]) == [4, 2, 0, 0] and not v[8:4 * TILES].any()
    assert v[4 * TILES] == pytest.approx(np.log2(65)) and v[4 * TILES + 1] == 0  # unroll 64, one categorical
    assert v[4 * TILES + 2] == pytest.approx(np.log2(33)) and v[4 * TILES + 3] == pytest.approx(np.log2(65))
    assert list(v[4 * TILES + 4:]) == [2, 1, 0, 1, 0, 0]  # tiles, parallel, vectorize, compute-at, cache-write, fuse
    with pytest.raises(InputError, match="not a schedule trace"):
        trace_vector([["SamplePerfectTile"]])


def test_input_check_lines_up_with_the_featurized_programs_and_fits_the_residual(tiny_collection, tiny_featurized):
    from cdmpp.bench.fit_study import residual_rows
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
    from cdmpp.featurize.trace import folder_traces
    from cdmpp.featurize.trace import with_trace_tokens
    from cdmpp.featurize.batch import dense_programs

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


def test_a_trace_token_checkpoint_trains_on_a_corpus_and_reads_each_programs_own_trace(two_device_dataset, tmp_path,
                                                                                     monkeypatch):
    from cdmpp import dataset as ds
    from cdmpp.featurize import FEATURE_DIM, as_module
    from cdmpp.featurize.trace import schedule_trace_vectors, trace_matrix
    from cdmpp.model import ModelConfig
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train
    from cdmpp.tvm_compat import Schedule

    out = tmp_path / "trace"
    train(TrainData([two_device_dataset], "dcgan-b1"), out,
          ModelConfig(d_model=32, n_heads=2, ff_dim=64, device_dim=8, trace_tokens=True),
          TrainConfig(epochs=2, batch_size=16), use_wandb=False, progress=False)
    predictor = LatencyPredictor.load(out)
    assert predictor.reads_traces and predictor.model.config.feature_dim == FEATURE_DIM + TRACE_DIM + 1

    folder = ds.device_dirs(two_device_dataset)[0]
    records = [p.record for p in ds.load_device_dir(folder).programs[:6]]
    device = folder.name
    from_records = predictor.predict(records, device=device)
    assert from_records.shape == (6,) and np.all(np.isfinite(from_records)) and np.all(from_records > 0)
    # a Schedule replayed from the record carries the same decisions: the tuner's candidates score alike
    schedules = []
    for r in records:
        sch = Schedule(r.workload.mod)
        r.trace.apply_to_schedule(sch, remove_postproc=False)
        schedules.append(sch)
    assert np.array_equal(schedule_trace_vectors(schedules), trace_matrix(folder)[0][:6])  # the records' file form
    np.testing.assert_allclose(predictor.predict(schedules, device=device), from_records, rtol=1e-5)
    # the MetaSchedule plugin reads each candidate's trace itself
    from cdmpp.serve.cost_model import SCORE_REFERENCE_S, CdmppCostModel
    from cdmpp.tvm_compat import ArgInfo, Target, feature_context, ms

    ctx = feature_context(Target(ds.read_manifest(folder)["device"]["target"]))
    cands = [ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod)) for sch in schedules]
    scores = CdmppCostModel(str(out), device=device).predict(ctx, cands)
    np.testing.assert_allclose(scores, SCORE_REFERENCE_S / from_records, rtol=1e-4)
    # a whole-network estimate passes its sampled schedules' traces
    from cdmpp.estimate import EstimateConfig, estimate_network, zoo_tasks

    est = estimate_network(predictor, zoo_tasks("dcgan-b1", ctx.target)[:2], device=device, target=ctx.target,
                           cfg=EstimateConfig(samples=3))
    assert len(est.tasks) == 2 and est.total_s > 0 and est.low_s <= est.total_s <= est.high_s
    # the HTTP service's workload + trace form reads the trace; its mod form is refused with the reason
    import tvm

    from cdmpp.featurize.trace import schedule_trace_json
    from cdmpp.serve import app

    monkeypatch.setattr(app, "_WORKER_PREDICTOR", None)  # the in-process worker's predictor, restored after
    app._worker_init(str(out))
    body = [{"workload": tvm.ir.save_json(r.workload.mod), "trace": schedule_trace_json(r.trace)} for r in records]
    (lat, _, _), _ = app._worker_predict(body, None, device, interval=False)
    np.testing.assert_allclose(lat, from_records, rtol=1e-5)
    status, message = app._worker_predict([{"mod": tvm.ir.save_json(as_module(records[0]))}], None, device)
    assert status == 422 and "schedule trace" in message
    # without traces it says what it needs
    with pytest.raises(InputError, match="schedule trace"):
        predictor.predict([as_module(r) for r in records], device=device)
    with pytest.raises(InputError, match="reads schedule traces"):
        predictor.predict_trees(predictor._featurized(records, None, device)[0], device)


def test_trace_tokens_need_the_corpus_protocol(tiny_collection, tmp_path):
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainData
    from cdmpp.train.train import train

    with pytest.raises(InputError, match="trace tokens need a dataset of device folders"):
        train(TrainData([tiny_collection[1].device_dir], "dcgan-b1"), tmp_path / "x",
              ModelConfig(trace_tokens=True), use_wandb=False, progress=False)
