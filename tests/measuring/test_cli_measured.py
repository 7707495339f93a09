import pytest

from cdmpp.cli import main


def test_evaluate_any_jsondatabase(tiny_collection, capsys):
    _, summary = tiny_collection
    assert main(["evaluate", "--work-dir", str(summary.device_dir), "--cache", str(summary.device_dir / "c")]) == 0
    out = capsys.readouterr().out
    assert "cdmpp transformer" in out and "xgboost PerStoreFeature" in out and "MAPE" in out

def test_validate_and_bad_arguments(tiny_collection, tmp_path, capsys):
    _, summary = tiny_collection
    assert main(["validate", str(summary.device_dir.parent)]) == 0
    assert "0 bad lines" in capsys.readouterr().out
    assert main(["evaluate", "--dataset", str(tmp_path)]) == 2
    assert "no device folder" in capsys.readouterr().err
    assert main(["collect", "-n", "gpt2-b1", "-o", str(tmp_path)]) == 2
    assert "reserved" in capsys.readouterr().err

def test_import_a_jsondatabase_twice_adds_nothing_the_second_time(tiny_collection, tmp_path, capsys):
    from cdmpp import dataset as ds

    _, summary = tiny_collection
    n = len(ds.load_device_dir(summary.device_dir).programs)
    args = ["import", "--work-dir", str(summary.device_dir), "--device", "my-laptop", "-o", str(tmp_path)]
    assert main(args) == 0 and f"{n} records added" in capsys.readouterr().out
    assert main(args) == 0 and "0 records added" in capsys.readouterr().out
    db = ds.load_device_dir(tmp_path / "my-laptop")
    assert len(db.programs) == n and db.manifest["device"]["device_id"] == "my-laptop"
    assert main(["import", "--work-dir", str(summary.device_dir), "--device", "../x", "-o", str(tmp_path)]) == 2

def test_train_writes_checkpoint_and_model_card(tiny_collection, tmp_path, capsys):
    cfg, _ = tiny_collection
    out = tmp_path / "ckpt"
    bench = tmp_path / "benchmark.md"
    bench.write_text("| split | model |\n| --- | --- |\n| random by program | x |\n")
    args = ["train", "-d", str(cfg.out_dir), "--holdout", "none", "-o", str(out), "--no-wandb"]
    args += ["--epochs", "1", "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c")]
    assert main(args + ["--benchmark-table", str(bench)]) == 0
    card = (out / "README.md").read_text()
    assert '"d_model": 16' in card and '"epochs": 1' in card and "| random by program | x |" in card
    assert main(["evaluate", "-c", str(out), "-d", str(cfg.out_dir), "--cache", str(tmp_path / "c")]) == 0
    assert "cdmpp transformer" in capsys.readouterr().out

def test_networks_lists_task_counts_from_a_dataset(tiny_collection, capsys):
    cfg, _ = tiny_collection
    assert main(["networks", "--dataset", str(cfg.out_dir)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["dcgan-b1"][-3:] == ["5", "5", "cdmpp.networks.classic.DCGANGenerator"]  # every task is listed
    assert rows["resnet_50-b1"][-2] == "?" and len(rows) >= 24

def test_train_with_cmd_needs_a_held_out_network(tiny_collection, tmp_path, capsys):
    cfg, _ = tiny_collection
    args = ["train", "-d", str(cfg.out_dir), "--holdout", "none", "-o", str(tmp_path / "ckpt"), "--no-wandb"]
    assert main(args + ["--epochs", "1", "--cmd-weight", "1", "--cache", str(tmp_path / "c")]) == 2
    assert "held-out network" in capsys.readouterr().err and not (tmp_path / "ckpt").exists()

def test_train_with_cmd_toward_the_validation_workloads(tiny_collection, tmp_path, capsys):
    import json

    cfg, summary = tiny_collection
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb", "--epochs", "1"]
    args += ["--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--cmd-weight", "0.5"]
    assert main(args + ["--cmd-domain", "validation"]) == 0  # no held-out network needed: the target is validation
    meta = json.loads((out / "config.json").read_text())["metadata"]
    assert meta["train_config"]["cmd_domain"] == "validation" and meta["val_programs"] > 0
    assert "validation programs (features only)" in (out / "README.md").read_text()
    with pytest.raises(SystemExit):  # argparse refuses a domain it does not know
        main(args[:6] + [str(tmp_path / "x")] + args[7:] + ["--cmd-domain", "test"])
    assert not (tmp_path / "x").exists()

def test_train_with_cmd_toward_another_device(tiny_collection, tmp_path, capsys):
    import json

    cfg, summary = tiny_collection
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb", "--epochs", "1"]
    args += ["--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--cmd-target", str(summary.device_dir),
             "--no-trace-tokens", "--no-loop-tokens"]
    assert main(args) == 2  # a target device without a CMD weight
    assert "cmd_weight > 0" in capsys.readouterr().err and not out.exists()
    assert main(args + ["--cmd-weight", "0.5"]) == 0
    meta = json.loads((out / "config.json").read_text())["metadata"]
    assert meta["cmd_target_device"] == summary.device_dir.name and meta["train_config"]["cmd_weight"] == 0.5
    assert f"all programs of device `{summary.device_dir.name}`" in (out / "README.md").read_text()
    assert main(["train", "-d", str(cfg.out_dir), "-o", str(tmp_path / "x"), "--cmd-weight", "1",
                 "--cmd-target", str(tmp_path / "nothing")]) == 2
    assert not (tmp_path / "x").exists()

def test_work_dir_of_a_shipped_folder_reads_its_gzipped_databases(tiny_collection, tmp_path, capsys):
    import shutil

    from cdmpp import dataset as ds

    _, summary = tiny_collection
    n = len(ds.load_device_dir(summary.device_dir).programs)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    for gz in ds.pack(summary.device_dir):
        shutil.move(gz, shipped / gz.name)  # only the .gz files, as a fresh clone has them
    assert not (shipped / ds.RECORD_FILE).exists()
    args = ["import", "--work-dir", str(shipped), "--device", "from-gz", "-o", str(tmp_path / "out")]
    assert main(args) == 0 and f"{n} records added" in capsys.readouterr().out
