"""The HTTP service against a real uvicorn server on 127.0.0.1: hostile and malformed bodies."""

import socket
import threading
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdmpp.serve.app import ServeConfig, create_app

COUNTS = {"requests": 0}


@pytest.fixture(scope="module")
def server():
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(config=ServeConfig(max_programs=8, max_body_bytes=100_000, timeout_s=60))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(600):
        if srv.started:
            break
        time.sleep(0.1)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        yield client
    srv.should_exit = True
    thread.join(timeout=10)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
programs = st.one_of(
    st.dictionaries(st.sampled_from(["mod", "workload", "trace", "tvmscript", "other"]), json_values, max_size=3),
    st.builds(lambda t: {"mod": t}, st.text(max_size=200)),
    st.builds(lambda t: {"mod": '{"root": 1, "nodes": [' + t + "]}"}, st.text(max_size=80)),
    st.builds(lambda w, tr: {"workload": w, "trace": tr}, st.text(max_size=100), st.lists(json_values, max_size=3)),
    json_values,
)
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"programs": st.lists(programs, max_size=10)},
        optional={"target": json_values | st.dictionaries(st.text(max_size=8), json_values, max_size=3),
                  "device": json_values, "extra": json_values},
    ),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(body=bodies, raw=st.one_of(st.none(), st.binary(max_size=300)))
def _fuzz_once(client, body, raw):
    if raw is not None:
        r = client.post("/predict", content=raw, headers={"content-type": "application/json"})
    else:
        r = client.post("/predict", json=body)
    COUNTS["requests"] += 1
    assert r.status_code < 500, (r.status_code, r.text[:300], body)


def test_a_thousand_hostile_bodies_get_no_5xx_and_the_server_still_answers(server):
    _fuzz_once(server)  # pylint: disable=no-value-for-parameter
    assert COUNTS["requests"] >= 1000
    assert server.get("/health").json()["status"] == "ok"
    r = server.post("/predict", json={"programs": [{"mod": _valid_mod()}]})
    assert r.status_code == 200 and r.json()["latency_s"][0] > 0


def test_an_oversized_body_is_refused_over_real_http(server):
    r = server.post("/predict", content=b"x" * 200_000, headers={"content-type": "application/json"})
    assert r.status_code == 413


def _valid_mod():
    from programs import vector_add

    from cdmpp.tvm_compat import IRModule, save_json

    return save_json(IRModule({"main": vector_add.with_attr("global_symbol", "main")}))


def test_tvmscript_that_would_create_a_file_is_refused_over_real_http(server, tmp_path):
    from programs import vector_add

    flag = tmp_path / "pwned"
    hostile = vector_add.script().replace("T.float32(1.0)", f"T.float32(__import__('os').system('touch {flag}'))")
    assert "touch" in hostile
    r = server.post("/predict", json={"programs": [{"tvmscript": hostile}]})
    assert r.status_code == 403
    time.sleep(0.5)
    assert not flag.exists()


estimate_bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={"network": json_values, "relax": json_values | st.text(max_size=120), "device": json_values,
                  "target": json_values, "samples": json_values,
                  "database": json_values | st.fixed_dictionaries({"workloads": json_values, "records": json_values})},
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(body=estimate_bodies)
def _fuzz_estimate_once(client, body):
    r = client.post("/estimate", json=body)
    assert r.status_code < 500, (r.status_code, r.text[:300], body)


def test_hostile_estimate_bodies_get_no_5xx(server):
    _fuzz_estimate_once(server)  # pylint: disable=no-value-for-parameter
    assert server.get("/health").json()["status"] == "ok"


def test_the_client_example_prints_a_per_task_table(server, capsys):
    import runpy
    from pathlib import Path

    example = runpy.run_path(str(Path(__file__).parents[2] / "docs" / "examples" / "estimate_client.py"))
    url = str(server.base_url).rstrip("/")
    device = server.get("/devices").json()[0]["device_id"]
    est = example["estimate"](url, "dcgan-b1", device, samples=2)
    assert est["device"] == device and len(est["tasks"]) >= 4
    assert example["main"](["--url", url, "--network", "dcgan-b1", "--device", device, "--samples", "2"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("sampled") == len(est["tasks"]) and "total:" in printed
    try:
        example["estimate"](url, "no_such_net", device)
    except RuntimeError as err:
        assert "HTTP 422" in str(err) and "unknown zoo network" in str(err)
    else:
        raise AssertionError("an unknown network must raise")
