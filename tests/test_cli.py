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
