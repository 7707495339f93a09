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
