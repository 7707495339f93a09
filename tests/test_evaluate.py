import shutil

import pytest

from cdmpp.dataset import DatasetError
from cdmpp.train.evaluate import load_featurized


def test_a_dataset_of_several_devices_needs_one_named(tiny_collection, tmp_path):
    _, summary = tiny_collection
    for name in ("cpu-a", "cpu-b"):
        shutil.copytree(summary.device_dir, tmp_path / name)
    with pytest.raises(DatasetError, match="several devices"):
        load_featurized(tmp_path, None, progress=False)
    db, data = load_featurized(tmp_path / "cpu-b", None, progress=False)
    assert len(data) == len(db.programs) == summary.measured
