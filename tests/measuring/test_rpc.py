"""Measurement through TVM's RPC tracker and RPCRunner, on loopback (127.0.0.1)."""

import json

import pytest


@pytest.fixture()
def loopback_tracker():
    from tvm.rpc.server import Server
    from tvm.rpc.tracker import Tracker

    tracker = Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    server = Server(
        host="127.0.0.1", port=9391, port_end=9490, tracker_addr=("127.0.0.1", tracker.port), key="cdmpp-loop", silent=True
    )
    yield tracker
    server.terminate()
    tracker.terminate()


def test_collect_through_a_loopback_rpc_tracker(loopback_tracker, tmp_path):
    import numpy as np

    from cdmpp import dataset as ds
    from cdmpp.collect import CollectConfig, MeasureConfig, RPCSettings, collect

    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=tmp_path,
        programs_per_task=2,
        batch_size=2,
        max_tasks_per_network=1,
        evolutionary_fraction=0.0,
        measure=MeasureConfig(repeat=3),
        rpc=RPCSettings("127.0.0.1", loopback_tracker.port, "cdmpp-loop"),
    )
    summary = collect(cfg, progress=False)
    db = ds.load_device_dir(summary.device_dir)
    assert summary.measured == len(db.programs) >= 1
    assert all(p.run_secs.shape == (3,) and np.all(p.run_secs > 0) for p in db.programs)
    m = json.loads((summary.device_dir / ds.MANIFEST_FILE).read_text())
    assert m["collections"][-1]["runner"]["rpc"]["device_key"] == "cdmpp-loop"


def test_cli_rejects_a_malformed_tracker_address(capsys):
    from cdmpp.cli import main

    assert main(["collect", "-n", "dcgan-b1", "-o", "unused", "--rpc-tracker", "nowhere"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
