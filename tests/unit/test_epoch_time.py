"""`cdmpp bench epoch-time` trains each precision on the same split and reports its seconds."""

import argparse
import json

import pytest

from benchmarks import epoch_time
from cdmpp.errors import InputError


def test_one_epoch_per_precision_on_the_same_split(two_device_dataset, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    epoch_time.add_arguments(parser)
    out = tmp_path / "epochs.json"
    args = parser.parse_args(["-d", str(two_device_dataset), "--precisions", "32-true", "--holdout", "dcgan-b1",
                              "--encoders", "packed", "padded", "--cache", str(tmp_path / "cache"), "-o", str(out)])
    assert epoch_time.main(args) == 0
    result = json.loads(out.read_text())
    assert [(r["precision"], r["encoder"]) for r in result["rows"]] == [("32-true", "packed"), ("32-true", "padded")]
    assert result["rows"][0]["seconds_per_epoch"] > 0 and result["train_programs"] > 0
    assert result["train_programs"] + result["val_programs"] < result["programs"]  # DCGAN's programs stay out
    assert "| 32-true | 32-true | 0 | padded |" in out.with_suffix(".md").read_text()


def test_bad_settings_are_named(two_device_dataset, tmp_path):
    with pytest.raises(InputError, match="unknown recipe"):
        epoch_time.time_epochs([two_device_dataset], tmp_path, ["32-true"], recipe="bigger")
    with pytest.raises(InputError, match="precisions must be among"):
        epoch_time.time_epochs([two_device_dataset], tmp_path, ["fp8"])
    with pytest.raises(InputError, match="epochs must be"):
        epoch_time.time_epochs([two_device_dataset], tmp_path, ["32-true"], epochs=0)
    with pytest.raises(InputError, match="encoders must be among"):
        epoch_time.time_epochs([two_device_dataset], tmp_path, ["32-true"], encoders=("nested",))
