import pytest
from fastapi.testclient import TestClient

from cdmpp.serve.app import create_app, parse_program

from programs import vector_add


@pytest.fixture(scope="module")
def client():
    return TestClient(create_app())


def test_predict_over_http(client):
    r = client.post("/predict", json={"programs": [vector_add.script()]})
    assert r.status_code == 200, r.text
    (lat,) = r.json()["latency_s"]
    import cdmpp

    assert lat == pytest.approx(cdmpp.predict_latency(vector_add), rel=1e-5)
    assert client.get("/health").json()["status"] == "ok"


def test_bad_requests(client):
    r = client.post("/predict", json={"programs": ["def broken(:"]})
    assert r.status_code == 422 and "malformed TVMScript" in r.json()["detail"]
    assert client.post("/predict", json={"programs": []}).status_code == 422
    assert client.post("/predict", json={"nothing": 1}).status_code == 422
    with pytest.raises(ValueError, match="malformed TVMScript"):
        parse_program("@T.prim_func\ndef f(:\n")
