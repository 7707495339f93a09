"""``cdmpp predict`` and ``cdmpp estimate``: the command-line twins of the Python API and of /estimate."""

import csv

import pytest

from cdmpp import InputError, UnsupportedProgramError
from cdmpp.cli import main
from cdmpp.predictor import FeaturizedProgram


def test_predict_writes_a_csv_row_per_record_with_the_measured_error(tiny_collection, tmp_path, capsys):
    from cdmpp import dataset as ds

    _, summary = tiny_collection
    out = tmp_path / "pred.csv"
    assert main(["predict", "--work-dir", str(summary.device_dir), "-o", str(out)]) == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    db = ds.load_device_dir(summary.device_dir)
    assert len(rows) == len(db.programs) > 0
    for row, prog in zip(rows, db.programs):
        assert float(row["measured_s"]) == pytest.approx(prog.latency, rel=1e-5)
        pred = float(row["predicted_s"])
        assert float(row["low_s"]) <= pred <= float(row["high_s"])
        assert float(row["error"]) == pytest.approx(pred / prog.latency - 1, abs=1e-3)
    assert "measured programs: MAPE" in capsys.readouterr().out

def test_predict_prints_what_the_python_api_predicts_trace_included(tiny_collection, tmp_path):
    """``cdmpp predict`` on a tuning log = ``LatencyPredictor.predict_interval`` on its records (the shipped
    checkpoint reads each record's schedule trace; as bare PrimFuncs the predictions differ)."""
    import numpy as np

    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module
    from cdmpp.inference_cli import predict_programs
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.tvm_compat import ms

    _, summary = tiny_collection
    out = tmp_path / "pred.csv"
    assert main(["predict", "--work-dir", str(summary.device_dir), "-o", str(out)]) == 0
    rows = list(csv.DictReader(open(out, encoding="utf-8")))
    for f in (ds.WORKLOAD_FILE, ds.RECORD_FILE):
        ds.unpack(summary.device_dir / f)
    db = ms.database.JSONDatabase(path_workload=str(summary.device_dir / ds.WORKLOAD_FILE),
                                  path_tuning_record=str(summary.device_dir / ds.RECORD_FILE))
    records = list(db.get_all_tuning_records())
    predictor = LatencyPredictor.load()
    assert predictor.reads_traces
    lat, low, high = predictor.predict_interval(records, records[0].target)
    cli = np.asarray([[float(r[k]) for k in ("predicted_s", "low_s", "high_s")] for r in rows])
    api = np.stack([lat, low, high], axis=1)
    # the database hands its records back in its own order: compare program by program, ordered by prediction
    np.testing.assert_allclose(cli[np.argsort(cli[:, 0])], api[np.argsort(api[:, 0])], rtol=1e-4)
    bare = predictor.predict([as_module(r) for r in records], records[0].target)
    assert np.max(np.abs(np.log(bare / lat))) > 1e-3  # the trace is read: bare PrimFuncs predict otherwise
    # a program that cannot be featurized is named and scored unknown; the others keep their predictions
    pred = predictor.predict_each([records[0], "not a program", records[1]], records[0].target)
    assert pred.problems[0] == pred.problems[2] == "" and pred.problems[1].startswith("cannot be featurized")
    assert np.isnan(pred.latency_s[1]) and np.isnan(pred.low_s[1])
    np.testing.assert_allclose(pred.latency_s[[0, 2]], lat[:2], rtol=1e-4)
    # the same core under the other error policies: a tuner's score 0 (infinite latency), or the error raised
    zero = predictor.predict_each([records[0], "not a program"], records[0].target, intervals=False, on_error="zero")
    assert np.isinf(zero.latency_s[1]) and np.isfinite(zero.latency_s[0])
    with pytest.raises(UnsupportedProgramError):
        predictor.predict_each([records[0], "not a program"], records[0].target, on_error="raise")
    with pytest.raises(InputError, match="on_error must be one of raise, mark, zero"):
        predictor.predict_each([records[0]], records[0].target, on_error="skip")
    # a program featurized already (keep_inputs) predicts as the program itself
    kept = predictor.predict_each(records[:2], records[0].target, intervals=False, keep_inputs=True)
    again = predictor.predict_each([FeaturizedProgram(t, tr) for t, tr in zip(kept.trees, kept.traces)],
                                   records[0].target, intervals=False)
    np.testing.assert_allclose(again.latency_s, kept.latency_s, rtol=1e-6)
    assert len(rows) == len(records) >= 3
    assert [p.problem for p in predict_programs(predictor, summary.device_dir)[0]] == [""] * len(rows)
