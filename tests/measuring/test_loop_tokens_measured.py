"""Loop tokens: every loop of the compact AST as a token among the leaves, in pre-order."""

import numpy as np

from cdmpp.featurize import FEATURE_DIM
from cdmpp.featurize.loops import LOOP_DIM


def test_train_and_predict_with_loop_tokens(tiny_collection, tmp_path):
    from cdmpp import dataset as ds
    from cdmpp.checkpoint import load_checkpoint
    from cdmpp.cli import main
    from cdmpp.predictor import LatencyPredictor

    _, summary = tiny_collection
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb", "--epochs", "1",
            "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--loop-tokens"]
    assert main(args) == 0
    model, _ = load_checkpoint(out)
    assert model.config.loop_tokens and model.config.feature_dim > FEATURE_DIM + LOOP_DIM
    db = ds.load_device_dir(summary.device_dir)
    records = [p.record for p in db.programs]
    pred = LatencyPredictor.load(out).predict(records)
    assert pred.shape == (len(records),) and np.all(np.isfinite(pred)) and np.all(pred > 0)
    assert main(["evaluate", "-c", str(out), "-d", str(summary.device_dir), "--holdout", "none",
                 "--cache", str(tmp_path / "c")]) == 0
