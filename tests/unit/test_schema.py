"""Typed records: a malformed manifest, task entry or checkpoint metadata gets an error that
names the file and the field; a well-formed one reads typed, extra fields kept."""

import json
import shutil
from pathlib import Path

import pytest

from cdmpp import dataset as ds
from cdmpp.checkpoint import checkpoint_meta, load_checkpoint
from cdmpp.errors import CheckpointError, DatasetError
from cdmpp.schema import tasks_of

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "cdmpp" / "checkpoints" / "default"


def test_a_manifest_reads_typed_and_a_malformed_one_names_its_file_and_field(tmp_path):
    folder = tmp_path / "cpu-x"
    folder.mkdir()
    task = {"network": "net-b1", "task_name": "add", "workload_key": "123", "weight": 2, "flops": 1e6, "new_key": 1}
    (folder / ds.MANIFEST_FILE).write_text(json.dumps({"tasks": [task], "device": {"device_id": "cpu-x"}}))
    m = ds.manifest_of(folder)
    assert m.device["device_id"] == "cpu-x" and m.tasks[0].weight == 2 and m.tasks[0].tuned_from is None
    assert tasks_of(ds.read_manifest(folder))[0].model_extra == {"new_key": 1}  # a later writer's field is kept
    (folder / ds.MANIFEST_FILE).write_text(json.dumps({"tasks": [{**task, "weight": "two"}]}))
    with pytest.raises(DatasetError, match=r"malformed manifest .*cpu-x/manifest.json: field tasks\.0\.weight"):
        ds.read_manifest(folder)
    with pytest.raises(DatasetError, match=r"task entry: field network"):
        tasks_of({"tasks": [{"task_name": "add", "workload_key": "1", "weight": 1}]})


def test_checkpoint_metadata_reads_typed_and_a_malformed_field_is_named(tmp_path):
    _, meta = load_checkpoint(SHIPPED)
    typed = checkpoint_meta(meta)
    assert typed.devices and typed.devices[0].device_id.startswith(("cpu-", "gpu-"))
    assert typed.interval is not None and typed.validation_metrics
    bad = tmp_path / "ckpt"
    shutil.copytree(SHIPPED, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["metadata"]["devices"][1]["row"] = "second"
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"ckpt/config.json: field devices\.1\.row"):
        load_checkpoint(bad)
