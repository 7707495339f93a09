import numpy as np
import pytest
from programs import matmul_relu, vector_add

import cdmpp
from cdmpp.featurize import UnsupportedProgramError


def test_predict_latency_round_trip():
    p = cdmpp.LatencyPredictor.load()
    out = p.predict([vector_add, matmul_relu])
    assert out.dtype == np.float64 and out.shape == (2,)
    assert np.all(np.isfinite(out)) and np.all(out > 0) and np.all(out < 10)  # seconds
    assert cdmpp.predict_latency(vector_add) == pytest.approx(out[0], rel=1e-6)
    import tvm

    assert p.predict(tvm.IRModule({"main": matmul_relu}))[0] == pytest.approx(out[1], rel=1e-6)


def test_predictions_on_tuning_records_follow_the_measured_latency(two_device_dataset):
    """The shipped checkpoint on 60 tuning records of a subset of the committed slice
    (in-distribution: it trained on these workloads), spread over its workloads, whose
    latencies span orders of magnitude: the ranking follows the measurements (Kendall tau
    > 0.6) and the level too (median |log(predicted / measured)| under log 2).  A constant
    model has tau 0, and a model off by a factor fails the level."""
    from scipy.stats import kendalltau

    from cdmpp import dataset as ds

    db = ds.load_device_dir(two_device_dataset / "cpu-intel_xeon_processor-emeraldrapids-avx512")
    picked = db.programs[:: max(1, len(db.programs) // 60)][:60]
    measured = np.array([p.latency for p in picked])
    assert measured.max() / measured.min() > 100  # a spread no constant can match
    predictor = cdmpp.LatencyPredictor.load()
    out = predictor.predict([p.record for p in picked], device=db.device_id)
    assert out.shape == (len(picked),) and np.all(out > 0)
    assert kendalltau(out, measured)[0] > 0.6
    assert np.median(np.abs(np.log(out / measured))) < np.log(2)


def test_unsupported_input_is_a_clear_error():
    with pytest.raises(UnsupportedProgramError, match="got int"):
        cdmpp.predict_latency(42)


def test_corrupt_checkpoint_path(tmp_path):
    from cdmpp.errors import CheckpointError

    with pytest.raises(CheckpointError):
        cdmpp.LatencyPredictor.load(tmp_path)


def test_prediction_imports_no_training_or_plotting_library():
    """The inference path (the predictor, its intervals, the model module) stays torch-only."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from programs import vector_add\n"
        "from cdmpp import LatencyPredictor\n"
        "p = LatencyPredictor.load()\n"
        "lat = p.predict([vector_add], device=p.devices[0])\n"
        "low = p.predict_interval([vector_add], device=p.devices[0])[1]\n"
        "assert lat[0] > 0 and low[0] > 0\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'lightning', 'pytorch_lightning', 'wandb', 'matplotlib'})\n"
        "print('LOADED', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    assert "LOADED []" in out.stdout, out.stdout + out.stderr


def test_bf16_inference_stays_within_a_few_percent_of_fp32(two_device_dataset):
    """``precision="bf16"`` runs the matrix products in bfloat16: on 40 tuning records of the
    slice each prediction stays within 5% of fp32's (bfloat16 keeps 8 bits of mantissa; a
    model whose forward pass broke under autocast would be off by orders of magnitude), and
    an unknown precision is refused when the checkpoint loads."""
    from cdmpp import dataset as ds
    from cdmpp.errors import InputError
    from cdmpp.tuning.config import TuneConfig

    db = ds.load_device_dir(two_device_dataset / "cpu-intel_xeon_processor-emeraldrapids-avx512")
    records = [p.record for p in db.programs[:: max(1, len(db.programs) // 40)][:40]]
    fp32 = cdmpp.LatencyPredictor.load().predict(records, device=db.device_id)
    bf16 = cdmpp.LatencyPredictor.load(precision="bf16").predict(records, device=db.device_id)
    assert fp32.shape == bf16.shape == (len(records),)
    assert np.abs(np.log(bf16 / fp32)).max() < np.log(1.05)
    assert not np.array_equal(bf16, fp32)  # it did run in bfloat16
    with pytest.raises(InputError, match="precision must be one of"):
        cdmpp.LatencyPredictor.load(precision="fp8")
    with pytest.raises(InputError, match="precision"):
        TuneConfig(precision="int4")
