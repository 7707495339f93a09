import os
import time

import pytest
from fastapi.testclient import TestClient

from cdmpp.serve.app import ServeConfig, create_app

from programs import vector_add


def _mod_json(func=vector_add):
    from cdmpp.tvm_compat import IRModule, save_json

    return save_json(IRModule({"main": func.with_attr("global_symbol", "main")}))


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(config=ServeConfig(max_programs=4, max_body_bytes=200_000, timeout_s=60))) as c:
        yield c


def test_predict_over_http_from_tvm_json(client):
    import cdmpp

    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}]})
    assert r.status_code == 200, r.text
    (lat,) = r.json()["latency_s"]
    assert lat == pytest.approx(cdmpp.predict_latency(vector_add), rel=1e-5)
    assert client.get("/health").json()["status"] == "ok"


def test_a_workload_and_its_trace_as_a_jsondatabase_line_holds_them(client, tiny_collection):
    from cdmpp import dataset as ds
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.tvm_compat import save_json

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    rec = db.programs[0].record
    # the first line of the record file: [workload index, [trace, run_secs, target, args_info]]
    _, line = next(iter(ds.iter_json_lines(summary.device_dir / ds.RECORD_FILE)))
    body = {"programs": [{"workload": save_json(rec.workload.mod), "trace": line[1][0]}],
            "target": db.manifest["device"]["target"]}
    r = client.post("/predict", json=body)
    assert r.status_code == 200, r.text
    expected = LatencyPredictor.load().predict([rec], db.manifest["device"]["target"])[0]
    assert r.json()["latency_s"][0] == pytest.approx(expected, rel=1e-5)


def test_tvmscript_that_would_run_code_is_refused(client, tmp_path):
    flag = tmp_path / "pwned"
    hostile = vector_add.script().replace(
        "T.float32(1.0)", f"T.float32(__import__('os').system('touch {flag}'))"
    )
    assert "touch" in hostile  # the payload is really in the program
    r = client.post("/predict", json={"programs": [{"tvmscript": hostile}]})
    assert r.status_code == 403 and "TVMScript is refused" in r.json()["detail"]
    time.sleep(0.5)
    assert not flag.exists()


def test_tvmscript_only_when_the_server_was_started_to_run_client_code(monkeypatch):
    from cdmpp.cli import main

    with TestClient(create_app(config=ServeConfig(execute_tvmscript=True))) as unsafe:
        r = unsafe.post("/predict", json={"programs": [{"tvmscript": vector_add.script()}]})
        assert r.status_code == 200, r.text
    assert main(["serve", "--host", "0.0.0.0", "--unsafe-execute-client-tvmscript"]) == 2


def test_bad_requests_get_a_4xx_that_names_the_problem(client):
    def post(body):
        return client.post("/predict", json=body)

    r = post({"programs": [{"mod": "{not json"}]})
    assert r.status_code == 422 and "programs[0]" in r.json()["detail"] and "malformed TVM JSON" in r.json()["detail"]
    r = post({"programs": [{"workload": _mod_json(), "trace": [[["bogus-inst", [], [], []]], []]}]})
    assert r.status_code == 422 and "trace does not replay" in r.json()["detail"]
    r = post({"programs": [{"mod": _mod_json()}], "target": {"kind": "no-such-target"}})
    assert r.status_code == 422 and "target" in r.json()["detail"]
    assert post({"programs": []}).status_code == 422
    assert post({"nothing": 1}).status_code == 422
    assert post({"programs": [{"mod": _mod_json(), "workload": _mod_json()}]}).status_code == 422
    r = post({"programs": [{"mod": _mod_json()}] * 5})
    assert r.status_code == 422 and "limit of 4" in r.json()["detail"]
    r = client.post("/predict", content=b"x" * 300_000, headers={"content-type": "application/json"})
    assert r.status_code == 413


def test_a_crash_or_a_hang_in_a_worker_costs_one_request_not_the_server(client):
    workers = client.app.state.workers
    status, message = workers.run(30, os._exit, 1)  # a worker dying as in a segfault
    assert status == 500 and "crashed" in message
    status, message = workers.run(1, time.sleep, 30)
    assert status == 504 and "longer than 1 s" in message
    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}]})
    assert r.status_code == 200, r.text


def test_devices_route_and_the_device_of_a_prediction(client):
    from cdmpp.predictor import LatencyPredictor

    known = LatencyPredictor.load().devices
    listed = client.get("/devices").json()
    assert [d["device_id"] for d in listed] == known and all(d["target"]["kind"] for d in listed)
    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}], "device": known[-1]})
    assert r.status_code == 200 and r.json()["device"] == known[-1]
    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}], "device": "cpu-nowhere"})
    assert r.status_code == 422 and "device: unknown device 'cpu-nowhere'" in r.json()["detail"]
    target = listed[0]["target"]  # a target whose mcpu matches a known device picks it
    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}], "target": target})
    assert r.status_code == 200 and r.json()["device"] == listed[0]["device_id"]
