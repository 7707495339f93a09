import numpy as np
import pytest

import cdmpp
from cdmpp.featurize import UnsupportedProgramError

from programs import matmul_relu, vector_add


def test_predict_latency_round_trip():
    p = cdmpp.LatencyPredictor.load()
    out = p.predict([vector_add, matmul_relu])
    assert out.dtype == np.float64 and out.shape == (2,)
    assert np.all(np.isfinite(out)) and np.all(out > 0) and np.all(out < 10)  # seconds
    assert cdmpp.predict_latency(vector_add) == pytest.approx(out[0], rel=1e-6)
    import tvm

    assert p.predict(tvm.IRModule({"main": matmul_relu}))[0] == pytest.approx(out[1], rel=1e-6)


def test_predict_on_a_tuning_record(tiny_collection):
    from cdmpp import dataset as ds

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    out = cdmpp.LatencyPredictor.load().predict([p.record for p in db.programs])
    assert out.shape == (len(db.programs),) and np.all(out > 0)


def test_unsupported_input_is_a_clear_error():
    with pytest.raises(UnsupportedProgramError, match="got int"):
        cdmpp.predict_latency(42)


def test_corrupt_checkpoint_path(tmp_path):
    from cdmpp.train.model import CheckpointError

    with pytest.raises(CheckpointError):
        cdmpp.LatencyPredictor.load(tmp_path)
