import numpy as np


def test_cost_model_scores_are_higher_for_faster(tiny_collection):
    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.serve.cost_model import CdmppCostModel
    from cdmpp.tvm_compat import ArgInfo, Schedule, feature_context, ms

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    mods = [as_module(p.record) for p in db.programs]
    cands = [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m)) for m in mods]
    ctx = feature_context(db.programs[0].record.target)
    scores = CdmppCostModel().predict(ctx, cands)
    lat = LatencyPredictor.load().predict(mods, db.programs[0].record.target)
    assert scores.shape == (len(mods),) and scores.max() == 1.0 and np.all(scores > 0)
    assert np.array_equal(np.argsort(-scores, kind="stable"), np.argsort(lat, kind="stable"))
