import os
import time

import pytest
from fastapi.testclient import TestClient
from programs import vector_add

from cdmpp.serve.app import ServeConfig, create_app


def _mod_json(func=vector_add):
    from cdmpp.tvm_compat import IRModule, save_json

    return save_json(IRModule({"main": func.with_attr("global_symbol", "main")}))

def test_predict_over_http_from_tvm_json(client):
    import cdmpp

    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}]})
    assert r.status_code == 200, r.text
    (lat,) = r.json()["latency_s"]
    assert lat == pytest.approx(cdmpp.predict_latency(vector_add), rel=1e-5)
    assert client.get("/health").json()["status"] == "ok"

def test_a_program_that_cannot_be_featurized_is_named_and_the_others_are_predicted(client):
    """``/predict`` goes through the predictor's core: one bad program gets null latencies and
    its reason, the rest of the batch its predictions."""
    from programs import with_while

    body = {"programs": [{"mod": _mod_json()}, {"mod": _mod_json(with_while)}, {"mod": _mod_json()}]}
    r = client.post("/predict", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["latency_s"][1] is None and out["low_s"][1] is None and out["high_s"][1] is None
    assert out["problems"][0] == out["problems"][2] == ""
    assert out["problems"][1].startswith("programs[1]: cannot be featurized") and "While" in out["problems"][1]
    assert out["latency_s"][0] == pytest.approx(out["latency_s"][2]) and out["latency_s"][0] > 0
    r = client.post("/predict", json={**body, "interval": False})
    assert r.status_code == 200 and r.json()["latency_s"][1] is None and r.json()["low_s"] is None

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
    r = client.post("/predict", content=b"x" * 5_000_000, headers={"content-type": "application/json"})
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

def test_each_prediction_carries_a_calibrated_interval(client):
    from cdmpp.predictor import LatencyPredictor

    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}] * 2})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["low_s"][0] < out["latency_s"][0] < out["high_s"][0]
    # the same program gets the same interval (seeded MC dropout), to float32 rounding of the batched point
    assert out["low_s"][1] == pytest.approx(out["low_s"][0], rel=1e-5)
    assert out["high_s"][1] == pytest.approx(out["high_s"][0], rel=1e-5)
    # calibrated on validation workloads: far wider than the raw MC-dropout spread (about 1.15x)
    assert out["high_s"][0] / out["low_s"][0] > 1.5
    assert LatencyPredictor.load().metadata["interval"]["method"] == "mc-normalized"
    r = client.post("/predict", json={"programs": [{"mod": _mod_json()}], "interval": False})  # points only
    assert r.status_code == 200 and r.json()["low_s"] is None and r.json()["high_s"] is None
    assert r.json()["latency_s"][0] == pytest.approx(out["latency_s"][0], rel=1e-5)

def test_estimate_bad_requests_name_the_field(client):
    r = client.post("/estimate", json={"network": "no_such_net"})
    assert r.status_code == 422 and "network: unknown zoo network" in r.json()["detail"]
    r = client.post("/estimate", json={"network": "dcgan-b1", "relax": "{}"})
    assert r.status_code == 422
    r = client.post("/estimate", json={"relax": "{not json"})
    assert r.status_code == 422 and "relax: malformed TVM JSON" in r.json()["detail"]
    r = client.post("/estimate", json={"relax": _mod_json(), "device": "cpu-nowhere"})
    assert r.status_code == 422 and "unknown device" in r.json()["detail"]
    r = client.post("/estimate", json={"network": "dcgan-b1", "samples": 0})
    assert r.status_code == 422
    r = client.post("/estimate", json={"network": "dcgan-b1", "database": {"workloads": [[1, 2]], "records": []}})
    assert r.status_code == 422 and "database.workloads[0]" in r.json()["detail"]
    assert "resnet_50-b1" in client.get("/networks").json()

def test_estimate_a_relax_module_sent_as_tvm_json(client):
    from cdmpp import networks as zoo
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.relax_import import relax_module_from_torch
    from cdmpp.tvm_compat import Target, save_json

    device = LatencyPredictor.load().devices[0]
    target = LatencyPredictor.load().descriptor(device).target
    spec = zoo.get_network("dcgan-b1")
    relax_json = save_json(relax_module_from_torch(spec.build(), spec.example_inputs(), Target(target)))
    r = client.post("/estimate", json={"relax": relax_json, "device": device, "samples": 2})
    assert r.status_code == 200, r.text
    est = r.json()
    assert est["network"] == "relax module" and est["device"] == device
    assert len(est["tasks"]) == 5 and all(t["source"] == "sampled" for t in est["tasks"])
    assert est["total_s"] == pytest.approx(sum(t["weight"] * t["latency_s"] for t in est["tasks"]))
