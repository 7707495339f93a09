"""Prediction intervals on real measured programs (the tiny collection) with the shipped checkpoint."""

import numpy as np
import pytest

from cdmpp.train.uncertainty import (
    IntervalConfig,
    calibrate,
    coverage_row,
    interval,
    interval_methods,
    mc_log_latency,
    mc_std,
)


@pytest.fixture(scope="module")
def shipped_inputs(shipped, tiny_collection, tiny_featurized):
    """The tiny collection's programs in the shipped checkpoint's input columns (with their traces)."""
    from cdmpp.featurize.trace import model_inputs

    return model_inputs(shipped.model.config, tiny_featurized[1], [tiny_collection[1].device_dir])

def test_mc_passes_vary_and_a_programs_interval_ignores_its_neighbours(shipped, shipped_inputs):

    data = shipped_inputs
    cfg = IntervalConfig(passes=8)
    point, passes = mc_log_latency(shipped.model, data, device_row=1, cfg=cfg)
    assert passes.shape == (8, len(data)) and point.shape == (len(data),)
    np.testing.assert_allclose(np.exp(point), shipped.predict_featurized(data, device_rows=1), rtol=1e-5)
    assert np.all(mc_std(passes) > 1e-3)  # dropout really is on in the passes
    alone, alone_passes = mc_log_latency(shipped.model, data, index=[2], device_row=1, cfg=cfg)
    np.testing.assert_allclose(alone_passes[:, 0], passes[:, 2], rtol=1e-6)  # same passes alone or in a batch
    assert not shipped.model.training  # left in eval mode

def test_calibration_covers_its_own_programs_and_orders_the_bounds(shipped, shipped_inputs):
    data = shipped_inputs
    cfg = IntervalConfig(passes=8, lower=0.25, upper=0.75)
    point, passes = mc_log_latency(shipped.model, data, device_row=1, cfg=cfg)
    cal = calibrate(point, passes, data.latency, cfg)
    assert cal["mc-normalized"]["alpha"] in (0.0, 0.25, 0.5, 0.75, 1.0)
    for method, (lo, hi) in interval_methods(point, passes, cal).items():
        assert np.all(lo <= hi), method
    lo, hi = interval(point, passes, {**cal, "method": "constant"})
    row = coverage_row(lo, hi, data.latency, np.exp(point))
    # the constant interval's quantiles come from these residuals: half of them lie inside
    assert row["coverage"] == pytest.approx(0.5, abs=1.0 / len(data) + 1e-9)
    assert row["below"] + row["coverage"] + row["above"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="matching"):
        calibrate(point[:1], passes, data.latency, cfg)
