import numpy as np
import pytest

from cdmpp.train.baselines import NotFittedError, TreeBaseline


def test_tree_baseline_not_fitted():
    with pytest.raises(NotFittedError):
        TreeBaseline().predict(np.zeros((1, 164), np.float32))
