from cdmpp.cli import main


def test_predict_call_stages_are_timed_beside_xgbmodel(tiny_collection, capsys):
    from cdmpp.bench.speed import predict_call_seconds

    _, summary = tiny_collection
    n, secs = predict_call_seconds(summary.device_dir, candidates=4, repeats=1)
    assert n == 4
    assert list(secs) == [
        "PerStoreFeature (TVM, not used by cdmpp)",
        "compact AST",
        "transformer",
        "predict (end to end)",
        "XGBModel.predict (TVM)",
        "CdmppCostModel.predict, new candidates",
        "CdmppCostModel.predict, seen candidates",
    ]
    assert all(s > 0 for s in secs.values())
    assert main(["bench", "speed", "-d", str(summary.device_dir.parent), "--candidates", "3", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "one predict call on 3 candidates" in out and "plugin / XGBModel" in out
