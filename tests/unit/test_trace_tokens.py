"""The schedule trace's decisions: as a vector, in the fit study's input check, and as a token of a checkpoint."""

import numpy as np
import pytest

from cdmpp.errors import InputError
from cdmpp.featurize.trace import TILES, TRACE_DIM, trace_vector

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
          ModelConfig(d_model=32, n_heads=2, ff_dim=64, device_dim=8, trace_tokens=True, loop_tokens=False),
          TrainConfig(epochs=2, batch_size=16, trace_dropout=0.0), use_wandb=False, progress=False)
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
    from cdmpp.tuning.cost_model import SCORE_REFERENCE_S, CdmppCostModel
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
    from cdmpp.serve import workers as app

    monkeypatch.setattr(app, "_WORKER_PREDICTOR", None)  # the in-process worker's predictor, restored after
    app.worker_init(str(out))
    body = [{"workload": tvm.ir.save_json(r.workload.mod), "trace": schedule_trace_json(r.trace)} for r in records]
    (lat, _, _, problems), _ = app.worker_predict(body, None, device, interval=False)
    assert problems == [""] * len(body)
    np.testing.assert_allclose(lat, from_records, rtol=1e-5)
    status, message = app.worker_predict([{"mod": tvm.ir.save_json(as_module(records[0]))}], None, device)
    assert status == 422 and "schedule trace" in message
    # without traces it says what it needs
    with pytest.raises(InputError, match="schedule trace"):
        predictor.predict([as_module(r) for r in records], device=device)
    with pytest.raises(InputError, match="reads schedule traces"):
        predictor.predict_trees(predictor.predict_each(records, None, device, intervals=False, keep_inputs=True).trees,
                                device)

def test_a_trace_dropout_checkpoint_predicts_bare_primfuncs_and_scores_both_ways(two_device_dataset, tmp_path,
                                                                                monkeypatch):
    import json

    import tvm

    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module
    from cdmpp.model import ModelConfig
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.serve import workers as app
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.device_scores import evaluate_devices
    from cdmpp.train.train import train

    out = tmp_path / "optional"
    train(TrainData([two_device_dataset], "dcgan-b1"), out,
          ModelConfig(d_model=32, n_heads=2, ff_dim=64, device_dim=8, trace_tokens=True),
          TrainConfig(epochs=2, batch_size=16, trace_dropout=0.3), use_wandb=False, progress=False)
    predictor = LatencyPredictor.load(out)
    assert predictor.reads_traces and predictor.model.config.trace_optional
    meta = json.loads((out / "config.json").read_text())["metadata"]
    assert meta["train_config"]["trace_dropout"] == 0.3 and meta["validation_metrics_without_trace"]

    folder = ds.device_dirs(two_device_dataset)[0]
    records = [p.record for p in ds.load_device_dir(folder).programs[:6]]
    device = folder.name
    with_trace = predictor.predict(records, device=device)
    mods = [as_module(r) for r in records]
    without = predictor.predict(mods, device=device)  # bare PrimFuncs: the leaves alone
    assert np.all(np.isfinite(without)) and np.all(without > 0) and not np.allclose(without, with_trace)
    mixed = predictor.predict([records[0], mods[1], records[2]], device=device)
    np.testing.assert_allclose(mixed, [with_trace[0], without[1], with_trace[2]], rtol=1e-5)
    trees = predictor.predict_each(mods, None, device, intervals=False, keep_inputs=True).trees
    np.testing.assert_allclose(predictor.predict_trees(trees, device), without, rtol=1e-5)
    # the service's mod form, refused by a checkpoint that needs the trace, is served
    monkeypatch.setattr(app, "_WORKER_PREDICTOR", None)
    app.worker_init(str(out))
    (lat, _, _, _), _ = app.worker_predict([{"mod": tvm.ir.save_json(mods[0])}], None, device, interval=False)
    np.testing.assert_allclose(lat, without[:1], rtol=1e-5)
    # cdmpp evaluate scores the dataset with each program's trace, or as bare PrimFuncs
    rows, title = evaluate_devices(out, two_device_dataset, None, tmp_path / "cache", progress=False)
    rows_bare, title_bare = evaluate_devices(out, two_device_dataset, None, tmp_path / "cache", progress=False,
                                             traces=False)
    assert "without their traces" in title_bare and "without" not in title
    a, b = rows[device]["cdmpp transformer"], rows_bare[device]["cdmpp transformer"]
    assert a["programs"] == b["programs"] > 0 and a["mape"] != b["mape"]
    # its own validation part, while the dataset still gives its split; refused once it does not
    val_rows, val_title = evaluate_devices(out, two_device_dataset, "validation", tmp_path / "cache", progress=False)
    assert "validation programs" in val_title and sum(r["cdmpp transformer"]["programs"]
                                                      for r in val_rows.values()) == meta["val_programs"]
    config = json.loads((out / "config.json").read_text())
    config["metadata"]["val_programs"] += 1  # as if programs had been added since training
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError, match="no longer gives this checkpoint's split"):
        evaluate_devices(out, two_device_dataset, "validation", tmp_path / "cache", progress=False)
    config["metadata"]["val_programs"] -= 1
    (out / "config.json").write_text(json.dumps(config))
    # any JSONDatabase: each record's own trace, as from the device folder
    from cdmpp.featurize.trace import database_traces, trace_matrix
    from cdmpp.train.evaluate import evaluate_checkpoint

    files = ds.resolve(folder / ds.WORKLOAD_FILE), ds.resolve(folder / ds.RECORD_FILE)
    assert np.array_equal(database_traces(*files)[0], trace_matrix(folder)[0])
    rows_db, _ = evaluate_checkpoint(out, workload_db=files[0], record_db=files[1], cache_dir=tmp_path / "cache",
                                     progress=False)
    assert rows_db["cdmpp transformer"]["programs"] == len(ds.load_device_dir(folder).programs)
    # calibrated twice: with the traces, and for bare PrimFuncs; each program gets its own kind's interval
    from cdmpp.intervals import IntervalConfig
    from cdmpp.train.uncertainty import calibrate_checkpoint

    results = calibrate_checkpoint(out, [two_device_dataset], tmp_path / "cache", IntervalConfig(passes=4),
                                   progress=False)
    assert set(results) == {"interval", "interval_without_trace"}
    assert "without their traces" in results["interval_without_trace"][0]["calibrated_on"]
    card = (out / "README.md").read_text()
    assert "Prediction intervals of programs without a trace" in card and "trace dropout 0.3" in card
    predictor = LatencyPredictor.load(out)
    q = predictor.metadata["interval_without_trace"]["constant"]
    predictor.metadata["interval_without_trace"] = {**predictor.metadata["interval_without_trace"], "method": "constant"}
    lat, low, high = predictor.predict_interval([mods[0], records[1]], device=device)
    assert low[0] / lat[0] == pytest.approx(np.exp(q["q_lower"]), rel=1e-6)
    assert high[0] / lat[0] == pytest.approx(np.exp(q["q_upper"]), rel=1e-6)
    assert low[1] / lat[1] != pytest.approx(np.exp(q["q_lower"]), rel=1e-3)  # the traced program: the other one
