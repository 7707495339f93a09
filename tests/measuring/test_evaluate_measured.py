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

def test_train_pooled_with_another_device(tiny_collection, tmp_path, capsys):
    import json

    from cdmpp.cli import main
    from cdmpp.dataset import load_device_dir

    cfg, summary = tiny_collection
    # the same real measurements, imported as a second device's
    assert main(["import", "--work-dir", str(summary.device_dir), "--device", "other-cpu", "-o", str(tmp_path)]) == 0
    other = tmp_path / "other-cpu"
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb"]
    args += ["--epochs", "1", "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--no-trace-tokens",
             "--no-loop-tokens"]
    assert main(args + ["--pool", str(summary.device_dir)]) == 2  # the trained device itself
    assert "already in training" in capsys.readouterr().err and not out.exists()
    assert main(args + ["--pool", str(tmp_path / "nothing")]) == 2 and not out.exists()
    assert main(args + ["--pool", str(other)]) == 0
    meta = json.loads((out / "config.json").read_text())["metadata"]
    db = load_device_dir(summary.device_dir)
    n_val = meta["val_programs"]
    # 2 tasks: one is the validation task, so the other device adds only the other task's programs
    assert 0 < n_val < len(db.programs)
    assert meta["pooled_devices"] == [{"device_id": "other-cpu", "dataset": str(other), "programs": len(db.programs) - n_val}]
    assert meta["train_programs"] == 2 * (len(db.programs) - n_val)
    assert "programs of device `other-cpu`" in (out / "README.md").read_text()
    capsys.readouterr()
    # scored on every program of a device folder ('none': no held-out network)
    assert main(["evaluate", "-c", str(out), "-d", str(other), "--holdout", "none", "--cache", str(tmp_path / "c")]) == 0
    assert f"all {len(db.programs)} programs of {other}" in capsys.readouterr().out
