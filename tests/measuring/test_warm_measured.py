"""The warm timing protocol: a device row of its own, learned, and the in-network estimate."""

import numpy as np
import pytest


def test_warm_timings_load_as_a_device_row_of_their_own(tiny_collection):
    from cdmpp import dataset as ds
    from cdmpp.train.devices import load_corpus

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    corpus = load_corpus(summary.device_dir.parent, None, progress=False)
    ids = [d.device_id for d in corpus.devices]
    assert ids == [summary.device_id, summary.device_id]  # one device id: the protocol is a field
    assert [d.protocol for d in corpus.devices] == ["cold", "warm"]
    assert [d.row_name for d in corpus.devices] == [summary.device_id, f"{summary.device_id} (warm)"]
    warm_rows = corpus.data.device_row == 2
    # a task per row, never mixed: the within-task terms never compare a cold and a warm latency
    assert set(corpus.data.workload[warm_rows]).isdisjoint(corpus.data.workload[~warm_rows])
    assert np.allclose(corpus.data.latency[warm_rows], [p.warm_latency for p in db.programs])
    assert np.allclose(corpus.data.latency[~warm_rows], [p.latency for p in db.programs])
    assert np.array_equal(corpus.raw_keys[warm_rows], corpus.raw_keys[~warm_rows])  # one workload, both sides
    assert corpus.descriptors()[1].tolist() == corpus.descriptors()[2].tolist()  # same device, other protocol
    assert [d.row_name for d in load_corpus(summary.device_dir.parent, None, progress=False,
                                            protocols=False).devices] == ids[:1]
    # warm rows only of the devices named: a checkpoint that learned no warm protocol of this one
    for named, rows in (([summary.device_id], 2), (["cpu-other"], 1)):
        assert len(load_corpus(summary.device_dir.parent, None, progress=False, protocols=named).devices) == rows

@pytest.fixture(scope="module")
def warm_checkpoint(tiny_collection, tmp_path_factory):
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    _, summary = tiny_collection
    out = tmp_path_factory.mktemp("warm") / "ckpt"
    train(TrainData([summary.device_dir.parent], None), out,
          ModelConfig(d_model=16, n_heads=2, ff_dim=32, device_dim=8, trace_tokens=False, loop_tokens=False,
                      pooling="mean"),
          TrainConfig(epochs=2, batch_size=8), use_wandb=False, progress=False)
    return out

def test_a_checkpoint_learns_both_protocols_and_the_estimate_reports_the_in_network_total(
        warm_checkpoint, tiny_collection):
    from cdmpp import dataset as ds
    from cdmpp.estimate import estimate_network, format_estimate, work_dir_best, zoo_tasks
    from cdmpp.predictor import LatencyPredictor

    _, summary = tiny_collection
    pred = LatencyPredictor.load(warm_checkpoint)
    dev = summary.device_id
    assert pred.devices == [dev] and pred.protocols(dev) == ["cold", "warm"]
    assert all("+warm" not in d["device_id"] for d in pred.metadata["devices"])
    assert pred.descriptor(dev).protocol == "cold"
    assert pred.resolve_device(target=pred.descriptor(dev).target).device_id == dev  # a target means the cold row
    d = summary.device_dir
    database = work_dir_best(d)
    tasks = [t for t in zoo_tasks("dcgan-b1", pred.descriptor(dev).target) if str(t.name) in
             {e["task_name"] for e in ds.read_manifest(d)["tasks"] if e["workload_key"] in database}]
    est = estimate_network(pred, tasks, dev, database=database)
    assert est.warm_learned and all(t.warm_s > 0 for t in est.tasks)
    assert est.warm_total_s == pytest.approx(sum(t.weight * t.warm_s for t in est.tasks))
    assert any(t.warm_s != pytest.approx(t.latency_s) for t in est.tasks)  # two rows, two predictions
    assert "in-network total (warm" in format_estimate(est)
    from cdmpp.inference_cli import predict_programs

    cold_rows, _ = predict_programs(pred, d, dev)
    warm_rows, got = predict_programs(pred, d, dev, protocol="warm")
    assert got == dev and [p.predicted_s for p in warm_rows] != [p.predicted_s for p in cold_rows]
    shipped = LatencyPredictor.load()
    zen4 = "cpu-amd_epyc-znver4-avx512"  # shipped: cold timings only on this CPU
    assert shipped.protocols(zen4) == ["cold"]
    from cdmpp.errors import UnknownDeviceError

    with pytest.raises(UnknownDeviceError, match="did not learn the warm protocol"):
        shipped.predict_each([], device=zen4, protocol="warm")


def test_warm_timings_added_after_training_are_left_out_of_scoring_with_a_warning(warm_checkpoint, tiny_collection):
    import json

    from cdmpp.train.device_scores import checkpoint_corpus

    _, summary = tiny_collection
    meta = json.loads((warm_checkpoint / "config.json").read_text())["metadata"]
    cold_only = {**meta, "devices": [d for d in meta["devices"] if d["descriptor"].get("protocol") != "warm"]}
    with pytest.warns(UserWarning, match="warm timings this checkpoint did not learn"):
        corpus, rows = checkpoint_corpus(cold_only, summary.device_dir.parent, None, progress=False)
    assert [d.protocol for d in corpus.devices] == ["cold"] and set(rows.tolist()) == {1}
    both, _ = checkpoint_corpus(meta, summary.device_dir.parent, None, progress=False)
    assert [d.protocol for d in both.devices] == ["cold", "warm"]
