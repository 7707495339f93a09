import pytest


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

def _database_lines(device_dir):
    from cdmpp import dataset as ds

    workloads = [obj for _, obj in ds.iter_json_lines(ds.resolve(device_dir / ds.WORKLOAD_FILE))]
    records = [obj for _, obj in ds.iter_json_lines(ds.resolve(device_dir / ds.RECORD_FILE))]
    return workloads, records

def test_estimate_a_zoo_network_with_a_tuning_database(client, tiny_collection):
    import numpy as np

    from cdmpp import dataset as ds

    _, summary = tiny_collection
    manifest = ds.read_manifest(summary.device_dir)
    workloads, records = _database_lines(summary.device_dir)
    body = {"network": "dcgan-b1", "target": manifest["device"]["target"], "samples": 2,
            "database": {"workloads": workloads, "records": records}}
    r = client.post("/estimate", json=body)
    assert r.status_code == 200, r.text
    est = r.json()
    assert len(est["tasks"]) == manifest["networks"]["dcgan-b1"]["tasks"]  # every task of the network
    by_source = {t["source"] for t in est["tasks"]}
    assert by_source == {"database", "sampled"}  # the tiny collection measured 2 of DCGAN's tasks
    db = ds.load_device_dir(summary.device_dir)
    best = {}
    for p in db.programs:
        key = db.workload_keys[p.workload_index]
        best[key] = min(best.get(key, np.inf), float(np.median(p.run_secs)))
    for t in est["tasks"]:
        assert t["low_s"] <= t["latency_s"] <= t["high_s"]
        if t["source"] == "database":
            assert t["measured_s"] == pytest.approx(best[t["workload_key"]])
        else:
            assert t["measured_s"] is None and "best-predicted of 2" in t["source_detail"]
    assert est["total_s"] == pytest.approx(sum(t["weight"] * t["latency_s"] for t in est["tasks"]))
    assert est["low_s"] < est["total_s"] < est["high_s"] and est["measured_total_s"] is None

def test_truth_check_refuses_a_folder_missing_tasks_before_any_timing(tiny_collection):
    from benchmarks.truth_check import TruthCheckConfig, run_truth_check
    from cdmpp import dataset as ds

    _, summary = tiny_collection  # 2 of DCGAN's 5 tasks measured, on this machine
    with pytest.raises(ds.DatasetError, match="tasks have no measured record"):
        run_truth_check(summary.device_dir, TruthCheckConfig(networks=("dcgan-b1",)), progress=False)

def test_truth_check_on_tuning_work_dirs_refuses_bad_sources_before_any_timing(tiny_collection, tmp_path):
    from benchmarks.truth_check import TruthCheckConfig, run_truth_check
    from cdmpp import dataset as ds
    from cdmpp.errors import InputError

    _, summary = tiny_collection  # a JSONDatabase folder holding 2 of DCGAN's 5 tasks
    with pytest.raises(InputError, match="2 tuning work dirs for 1 networks"):
        TruthCheckConfig(networks=("dcgan-b1",), databases=(summary.device_dir, summary.device_dir))
    with pytest.raises(InputError, match="one tuning work dir per network"):
        run_truth_check(None, TruthCheckConfig(networks=("dcgan-b1",)), progress=False)
    with pytest.raises(ds.DatasetError, match="a MetaSchedule JSONDatabase folder"):
        run_truth_check(None, TruthCheckConfig(networks=("dcgan-b1",), databases=(tmp_path,)), progress=False)
    with pytest.raises(InputError, match="carries no weights"):
        run_truth_check(None, TruthCheckConfig(networks=("net.json",), databases=(summary.device_dir,)),
                        progress=False)
    with pytest.raises(ds.DatasetError, match=r"dcgan-b1: 3 of its 5 tasks have no measured record in .*dataset"):
        run_truth_check(None, TruthCheckConfig(networks=("dcgan-b1",), databases=(summary.device_dir,)),
                        progress=False)
    # a network of the user's own, as module.py:function: none of its tasks was tuned
    (tmp_path / "my_net.py").write_text(
        "import torch\n\ndef build():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(8, 16, 1), torch.nn.ReLU()).eval(), (torch.randn(1, 8, 14, 14),)\n")
    with pytest.raises(ds.DatasetError, match=r"my_net.py:build: 1 of its 1 tasks have no measured record in .*: fused_conv2d_add_relu"):
        run_truth_check(None, TruthCheckConfig(networks=(f"{tmp_path}/my_net.py:build",),
                                               databases=(summary.device_dir,)), progress=False)

def test_truth_check_retimes_each_chosen_record_in_this_run(tiny_collection):
    """``--retime`` builds and times each task's fastest record again, cold and warm: a fresh
    timing of the same program (close to the recorded one on this machine, not a copy of
    it), summed by task weight, and shown beside the end-to-end latency."""
    from benchmarks.truth_check import _folder_best, _retimed, _weighted_sum, format_truth_check
    from cdmpp import dataset as ds
    from cdmpp.tasks import Task
    from cdmpp.tvm_compat import Target

    _, summary = tiny_collection  # 2 DCGAN tasks x 3 programs, timed on this machine
    db = ds.load_device_dir(summary.device_dir)
    by_hash = _folder_best(db)
    tasks = [Task(f"task{i}", i + 1, mod) for i, (mod, _) in enumerate(by_hash.values())]
    secs, warm = _retimed(tasks, by_hash, Target(db.manifest["device"]["target"]))
    assert set(secs) == set(warm) == {t.name for t in tasks} and len(tasks) == 2
    total = _weighted_sum(tasks, secs)
    assert total == pytest.approx(sum(t.weight * secs[t.name] for t in tasks))
    assert _weighted_sum(tasks, {tasks[0].name: 1.0}) is None  # a task without a time: no sum
    for t, (_, best) in zip(tasks, by_hash.values()):
        assert secs[t.name] != best.measured_s  # timed again, not read back
        assert 0.1 < secs[t.name] / best.measured_s < 10
        assert warm[t.name] != secs[t.name] and 0.1 < warm[t.name] / secs[t.name] < 10  # the other protocol
    row = {"network": "dcgan-b1", "tasks": 2, "calls": 3, "measured_e2e_s": total / 2, "measured_sum_s": total,
           "estimate_s": total, "estimate_low_s": total / 2, "estimate_high_s": 2 * total, "retimed_sum_s": total,
           "retimed_warm_sum_s": total / 4}
    table = format_truth_check([row], markdown=True)
    assert "retimed warm sum / e2e" in table and "| 0.50 |" in table
    assert "retimed sum / e2e" in table and "| 2.00 |" in table
