"""Prediction intervals on real measured programs (the tiny collection) with the shipped checkpoint."""

import pytest

from cdmpp.errors import InputError
from cdmpp.train.uncertainty import (
    IntervalConfig,
)


def test_config_errors():
    with pytest.raises(InputError, match="passes"):
        IntervalConfig(passes=1)
    with pytest.raises(InputError, match="lower < upper"):
        IntervalConfig(lower=0.9, upper=0.1)

def test_predictor_interval_uses_the_checkpoints_calibration(shipped):
    from programs import vector_add

    lat, low, high = shipped.predict_interval([vector_add], device=shipped.devices[0])
    assert lat.shape == low.shape == high.shape == (1,)
    assert low[0] < lat[0] < high[0] and high[0] / low[0] > 1.5  # calibrated, not the raw MC spread
    assert lat[0] == pytest.approx(shipped.predict([vector_add], device=shipped.devices[0])[0], rel=1e-5)
