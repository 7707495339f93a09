import numpy as np
import pytest

from cdmpp.train.splits import random_programs


def test_random_split_covers_every_program_once():
    s = random_programs(50, test_fraction=0.2, val_fraction=0.1, seed=3)
    both = np.concatenate([s.train, s.val, s.test])
    assert sorted(both.tolist()) == list(range(50)) and len(s.test) == 10 and len(s.val) == 5
    assert "both sides" in s.holdout  # never silent about sharing tasks
    with pytest.raises(ValueError):
        random_programs(2)
