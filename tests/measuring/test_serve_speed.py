import json

from cdmpp.cli import main


def test_predict_call_stages_are_timed_beside_xgbmodel(tiny_collection, capsys, tmp_path):
    from benchmarks.speed import predict_call_seconds

    _, summary = tiny_collection
    n, secs = predict_call_seconds(summary.device_dir, candidates=4, repeats=1)
    assert n == 4
    assert list(secs) == [
        "PerStoreFeature (TVM, not used by cdmpp)",
        "structural hash (the plugin's cache key)",
        "compact AST",
        "compact AST, Python walk (reference)",
        "schedule trace vectors",
        "transformer",
        "transformer, bf16 (precision='bf16')",
        "online trees (residual XGBoost, fitted)",
        "predict (end to end)",
        "XGBModel.predict (TVM)",
        "CdmppCostModel.predict, new candidates",
        "CdmppCostModel.predict, new candidates, bf16",
        "CdmppCostModel.predict, seen candidates",
    ]
    assert all(s > 0 for s in secs.values())
    # already-seen candidates are answered from the plugin's cache, without featurizing again
    assert secs["CdmppCostModel.predict, seen candidates"] < secs["CdmppCostModel.predict, new candidates"]
    out_json = tmp_path / "speed.json"
    assert main(["bench", "speed", "-d", str(summary.device_dir.parent), "--candidates", "3", "--repeats", "1",
                 "--output", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "one predict call on 3 candidates" in out and "plugin / XGBModel" in out
    # the written table names the checkpoint it timed, and the JSON the same line
    md = out_json.with_suffix(".md").read_text(encoding="utf-8")
    assert md.startswith("Checkpoint: `") and "weights sha256 " in md.splitlines()[0]
    assert "| compact AST |" in md
    assert json.loads(out_json.read_text(encoding="utf-8"))["checkpoint"] == md.splitlines()[0]


def test_candidates_can_be_new_schedules_of_one_task_of_a_network(tiny_collection, capsys):
    from cdmpp import dataset as ds

    _, summary = tiny_collection
    assert len(ds.load_device_dir(summary.device_dir, max_records=2).programs) == 2
    assert main(["bench", "speed", "-d", str(summary.device_dir), "--task", "x"]) == 2
    assert "--task needs --network" in capsys.readouterr().err
    argv = ["bench", "speed", "-d", str(summary.device_dir), "--network", "dcgan-b1", "--candidates", "3",
            "--repeats", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "one predict call on 3 candidates: new schedules of dcgan-b1's largest task" in out
    assert main(argv + ["--task", "no_such_task"]) == 2
    assert "dcgan-b1 has no task named no_such_task" in capsys.readouterr().err
