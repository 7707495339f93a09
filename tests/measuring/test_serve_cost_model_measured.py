import logging

import numpy as np
import pytest


def _candidates(mods):
    from cdmpp.tvm_compat import ArgInfo, Schedule, ms

    return [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m)) for m in mods]

@pytest.fixture(scope="module")
def measured(tiny_collection):
    """The tiny collection's programs, their candidates, measured latencies (s) and a feature context."""
    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module
    from cdmpp.tvm_compat import feature_context

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    mods = [as_module(p.record) for p in db.programs]
    target = db.programs[0].record.target
    latency = np.asarray([p.latency for p in db.programs])
    return mods, _candidates(mods), latency, feature_context(target), target

def test_scores_are_higher_for_faster_on_one_scale(measured):
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.tuning.cost_model import SCORE_REFERENCE_S, CdmppCostModel

    mods, cands, _, ctx, target = measured
    scores = CdmppCostModel().predict(ctx, cands)
    lat = LatencyPredictor.load().predict(mods, target)
    assert scores.shape == (len(mods),) and np.all(scores > 0)
    np.testing.assert_allclose(scores, SCORE_REFERENCE_S / lat, rtol=1e-5)
    assert np.array_equal(np.argsort(-scores, kind="stable"), np.argsort(lat, kind="stable"))

def test_a_score_does_not_depend_on_the_other_candidates(measured):
    from cdmpp.tuning.cost_model import CdmppCostModel

    _, cands, _, ctx, _ = measured
    together = CdmppCostModel().predict(ctx, cands)
    fresh = CdmppCostModel()
    alone = np.concatenate([fresh.predict(ctx, [c]) for c in cands])
    np.testing.assert_allclose(alone, together, rtol=1e-5)
    # the fastest candidate of a call is not pinned to one score (per-call normalisation was)
    assert CdmppCostModel().predict(ctx, cands[1:2])[0] == pytest.approx(together[1], rel=1e-5)
    assert len(set(np.round(together, 12))) > 1

def test_an_unfeaturizable_candidate_scores_lowest_and_is_logged(measured, caplog):
    from programs import matmul_relu, vector_add

    from cdmpp.tuning.cost_model import CdmppCostModel
    from cdmpp.tvm_compat import IRModule

    _, cands, _, ctx, _ = measured
    two_funcs = IRModule(
        {"main": vector_add.with_attr("global_symbol", "main"), "other": matmul_relu.with_attr("global_symbol", "other")}
    )
    (bad,) = _candidates([two_funcs])
    with caplog.at_level(logging.WARNING, logger="cdmpp.tuning.cost_model"):
        scores = CdmppCostModel().predict(ctx, [cands[0], bad, cands[1]])
    assert scores[1] == 0.0 and scores[0] > 0 and scores[2] > 0
    assert "cannot be featurized" in caplog.text and "PrimFunc" in caplog.text

def test_update_learns_the_measured_trials_and_save_load_keeps_them(measured, tmp_path):
    from cdmpp.tuning.cost_model import SCORE_REFERENCE_S, CdmppCostModel, OnlineConfig
    from cdmpp.tvm_compat import ms

    _, cands, latency, ctx, _ = measured
    # the pretrained model is wrong for this "device": every program is 50x slower than measured here
    slow = latency * 50.0
    model = CdmppCostModel(online=OnlineConfig(min_trials=4))
    before = np.log(SCORE_REFERENCE_S / model.predict(ctx, cands))
    results = [ms.runner.RunnerResult([float(s)] * 3, None) for s in slow]
    failed = ms.runner.RunnerResult(None, "build failed")
    model.update(ctx, cands + cands[:1], results + [failed])
    assert model.trials_seen == len(cands)
    after = np.log(SCORE_REFERENCE_S / model.predict(ctx, cands))
    err_before = np.sqrt(np.mean((before - np.log(slow)) ** 2))
    err_after = np.sqrt(np.mean((after - np.log(slow)) ** 2))
    assert err_before > 2.0 and err_after < 0.5 * err_before

    model.save(str(tmp_path / "adapted"))
    again = CdmppCostModel()
    again.load(str(tmp_path / "adapted"))
    assert again.trials_seen == len(cands)
    np.testing.assert_allclose(again.predict(ctx, cands), model.predict(ctx, cands), rtol=1e-6)

def test_update_without_online_learning_changes_nothing(measured):
    from cdmpp.tuning.cost_model import CdmppCostModel, OnlineConfig
    from cdmpp.tvm_compat import ms

    _, cands, latency, ctx, _ = measured
    model = CdmppCostModel(online=OnlineConfig(enabled=False))
    before = model.predict(ctx, cands)
    model.update(ctx, cands, [ms.runner.RunnerResult([float(s) * 50], None) for s in latency])
    np.testing.assert_array_equal(model.predict(ctx, cands), before)

def test_the_residual_trees_read_the_trace_beside_the_leaves(measured):
    """With ``trace_inputs`` the online trees' input is the summed leaves plus the schedule-trace
    vector; without it the leaves alone (the ablation)."""
    from cdmpp.featurize import FEATURE_DIM
    from cdmpp.featurize.trace import TRACE_DIM
    from cdmpp.tuning.cost_model import CdmppCostModel, OnlineConfig
    from cdmpp.tvm_compat import ms

    _, cands, latency, ctx, _ = measured
    results = [ms.runner.RunnerResult([float(s) * 50] * 3, None) for s in latency]
    widths = {}
    for trace_inputs in (True, False):
        model = CdmppCostModel(online=OnlineConfig(min_trials=4, trace_inputs=trace_inputs))
        model.predict(ctx, cands)
        model.update(ctx, cands, results)
        widths[trace_inputs] = model._booster.num_features()
        assert np.all(np.isfinite(model.predict(ctx, cands)))
    assert widths == {True: FEATURE_DIM + TRACE_DIM, False: FEATURE_DIM}

def test_the_pairwise_objective_learns_the_order_of_a_tasks_trials(measured, tmp_path):
    """Trials measured in the reverse of the pretrained order: the ranking trees turn the order
    around, and the level stays that of the trials."""
    from cdmpp.train.metrics import mean_kendall_tau
    from cdmpp.tuning.cost_model import SCORE_REFERENCE_S, CdmppCostModel, OnlineConfig
    from cdmpp.tvm_compat import ms

    def kendalltau(a, b):
        return mean_kendall_tau(a, b, np.zeros(len(a), np.int64))

    _, cands, latency, ctx, _ = measured
    model = CdmppCostModel(online=OnlineConfig(min_trials=4, objective="pairwise", rounds=80))
    before = SCORE_REFERENCE_S / model.predict(ctx, cands)
    y = np.empty_like(before)
    y[np.argsort(before, kind="stable")] = np.sort(latency)[::-1]
    model.update(ctx, cands, [ms.runner.RunnerResult([float(s)] * 3, None) for s in y])
    after = SCORE_REFERENCE_S / model.predict(ctx, cands)
    assert kendalltau(before, y) < -0.9 and kendalltau(after, y) > 0.5
    assert abs(np.median(np.log(after / y))) < np.log(3.0)
    model.save(str(tmp_path / "adapted"))
    again = CdmppCostModel()
    again.load(str(tmp_path / "adapted"))
    assert again.online.objective == "pairwise"
    np.testing.assert_allclose(again.predict(ctx, cands), model.predict(ctx, cands), rtol=1e-6)
