"""A collection's records on disk: what it writes (cold and warm timings, failures, the time between kernels), resuming and stopping, re-measuring, and tasks that fail or share a workload."""

import dataclasses
import json

import numpy as np
import pytest
from support import gather_module, program_keys

from cdmpp import dataset as ds
from cdmpp.card import card
from cdmpp.collect import collect


def test_tiny_real_collection(tiny_collection):
    cfg, summary = tiny_collection
    assert summary.measured + summary.failed >= 6
    keys, db = program_keys(summary.device_dir)
    assert len(db.programs) == summary.measured >= 4
    for p in db.programs:  # every repeat is kept and is a real, positive timing
        assert p.run_secs.shape == (3,) and np.all(p.run_secs > 0) and np.all(p.run_secs < 10)
        assert p.latency == np.median(p.run_secs)
    m = json.loads((summary.device_dir / ds.MANIFEST_FILE).read_text())
    assert m["measurement"]["number"] == 1 and m["measurement"]["enable_cpu_cache_flush"] is True
    assert m["device"]["device_id"] == summary.device_id and m["tvm_version"].startswith("0.27")
    assert {t["network"] for t in m["tasks"]} == {"dcgan-b1"} and all(t["weight"] >= 1 for t in m["tasks"])
    assert len(set(keys)) == len(keys)
    assert m["networks"]["dcgan-b1"]["family"] == "dcgan"

def test_a_collection_measures_the_time_between_kernels_and_the_estimate_adds_it(tiny_collection):
    """The collector times the Relax VM's cost per kernel call and per inference on this CPU,
    keeps it in the device descriptor and the card, and an estimate for a device that has
    it adds ``entry + per call x calls`` to its in-network total."""
    from cdmpp.collect.vm_call import measure_vm_call
    from cdmpp.device import DeviceDescriptor
    from cdmpp.estimate import NetworkEstimate, TaskEstimate
    from cdmpp.tvm_compat import Target

    _, summary = tiny_collection
    m = json.loads((summary.device_dir / ds.MANIFEST_FILE).read_text())
    dev = DeviceDescriptor.from_json(m["device"])
    assert 0 < dev.vm_call_s < 1e-3 and 0 <= dev.vm_entry_s < 1e-2
    assert m["collections"][-1]["vm_call_s"] == dev.vm_call_s
    assert DeviceDescriptor.from_json(dev.to_json()) == dev
    assert "vm_call_s" not in DeviceDescriptor(**{**dev.to_json(), "vm_call_s": 0.0, "vm_entry_s": 0.0}).to_json()
    assert "us per kernel call" in card(summary.device_dir)
    per_call, entry = measure_vm_call(Target({"kind": "llvm", "num-cores": 2}), calls=65, repeat=5)
    assert per_call > 0 and entry >= 0
    est = NetworkEstimate("d", [TaskEstimate("t", 3, "k", "database", "", 1e-3, 1e-3, 1e-3)], total_s=3e-3,
                          between_kernels_s=2e-4)
    assert est.network_s == 3.2e-3 and est.to_json()["network_s"] == 3.2e-3

def test_every_program_is_timed_warm_too_in_a_record_file_tvm_opens(tiny_collection, tmp_path):
    """The warm protocol: each measured program has warm repeats, joined to its cold record by
    its trace, in a tuning-record file that TVM's JSONDatabase opens with the workload file."""
    import shutil

    from cdmpp.tvm_compat import JSONDatabase

    _, summary = tiny_collection
    d = summary.device_dir
    db = ds.load_device_dir(d)
    assert all(p.warm_secs is not None and p.warm_secs.size >= 3 and np.all(p.warm_secs > 0) for p in db.programs)
    assert len({round(p.warm_latency, 12) for p in db.programs}) == len(db.programs)  # each its own timing
    warm_db = JSONDatabase(str(d / ds.WORKLOAD_FILE), str(d / ds.WARM_RECORD_FILE))
    assert len(warm_db.get_all_tuning_records()) == len(db.programs)
    m = json.loads((d / ds.MANIFEST_FILE).read_text())
    assert m["measurement"]["warm"] is True and m["collections"][-1]["stage_seconds"]["warm timing"] > 0
    assert "Timing protocols: cold" in card(d) and "| dcgan |" in card(d)
    copy = tmp_path / d.name
    shutil.copytree(d, copy)
    (copy / ds.WARM_RECORD_FILE).unlink()
    cold_only = ds.load_device_dir(copy)
    assert len(cold_only.programs) == len(db.programs) and all(np.isnan(p.warm_latency) for p in cold_only.programs)

def test_resume_continues_without_duplicates(tiny_collection, tmp_path):
    import shutil

    cfg, summary = tiny_collection
    out = tmp_path / "ds"
    shutil.copytree(cfg.out_dir, out)
    dev = out / summary.device_id
    # a collection killed mid-write leaves a truncated last line: it is moved aside, not lost
    with open(dev / ds.RECORD_FILE, "a", encoding="utf-8") as f:
        f.write('[0, [[["GetSBlock"')
    before, _ = program_keys(dev)
    polls = []  # a Ctrl-C during the first batch: that batch is stored, then the collection ends
    stopped = collect(
        dataclasses.replace(cfg, out_dir=out, programs_per_task=4),
        progress=False,
        should_stop=lambda: polls.append(1) or len(polls) > 2,
    )
    assert stopped.stopped and stopped.measured <= cfg.batch_size
    m = json.loads((dev / ds.MANIFEST_FILE).read_text())
    assert m["collections"][-1]["stopped_early"] is True
    # pack_every_s=0: the gzipped (committed) copies are rewritten after every task and at the end
    more = collect(dataclasses.replace(cfg, out_dir=out, programs_per_task=4, pack_every_s=0.0), progress=False)
    import gzip

    for name in (ds.RECORD_FILE, ds.WORKLOAD_FILE):
        assert gzip.decompress((dev / (name + ".gz")).read_bytes()) == (dev / name).read_bytes()
    assert json.loads((dev / ds.MANIFEST_FILE).read_text())["collections"][-1]["measured"] == more.measured
    # and, at the end, the dataset card of what the folder holds
    assert f"- Measured programs: {len(ds.load_device_dir(dev).programs)} over" in (dev / "README.md").read_text()
    more.measured += stopped.measured
    after, db = program_keys(dev)
    assert after[: len(before)] == before  # nothing finished is lost
    assert len(after) == len(before) + more.measured
    assert len(set(after)) == len(after)  # nothing duplicated
    per_task = {}
    for k, _ in after:
        per_task[k] = per_task.get(k, 0) + 1
    assert max(per_task.values()) <= 4  # programs_per_task is honoured
    assert (dev / (ds.RECORD_FILE + ".corrupt")).read_text().startswith('[0, [[["GetSBlock"')

def test_failures_are_kept_with_their_error(tiny_collection, tmp_path):
    import shutil

    from cdmpp.collect.store import DatasetStore
    from cdmpp.tasks import Task
    from cdmpp.tvm_compat import TuningRecord

    cfg, summary = tiny_collection
    dev = tmp_path / summary.device_id
    shutil.copytree(summary.device_dir, dev)
    db = ds.load_device_dir(dev)
    rec = db.programs[0].record
    key = db.workload_keys[db.programs[0].workload_index]
    fail_file = dev / ds.FAILURE_FILE
    before = fail_file.read_text().splitlines() if fail_file.exists() else []  # a build that timed out on a busy machine
    store = DatasetStore(dev)
    failed_before = store.failed.get(key, 0)
    task = Task("t", 1, None, network="dcgan-b1", flops=0.0, workload_key=key)
    store.add_failure(task, "123", "run", "RuntimeError: boom", TuningRecord(rec.trace, rec.workload, None, rec.target))
    (line,) = [json.loads(s) for s in fail_file.read_text().splitlines()[len(before) :]]
    assert line["error"] == "RuntimeError: boom" and line["stage"] == "run" and line["record"][1] is None
    again = DatasetStore(dev)  # a restarted collection knows the failure and will not retry it
    assert again.failed[key] == failed_before + 1 and "123" in again.failed_keys[key]
    assert len(ds.load_device_dir(dev).programs) == len(db.programs)  # failures are not labels

def test_remeasure_a_sample_for_drift_and_resume(tiny_collection, tmp_path):
    import shutil

    from cdmpp.collect import remeasure

    _, summary = tiny_collection
    dev = tmp_path / summary.device_id
    shutil.copytree(summary.device_dir, dev)
    path = remeasure(dev, sample=2, progress=False)
    lines = [json.loads(s) for s in path.read_text().splitlines()]
    assert len(lines) == 2 and all(len(o["again"]) == 3 and min(o["again"]) > 0 for o in lines)
    remeasure(dev, sample=2, progress=False)  # the same sample again: nothing is timed twice
    assert len(path.read_text().splitlines()) == 2
    assert "Run-to-run drift of the median, 2 programs" in card(dev)

def test_remeasure_on_a_shipped_folder_keeps_the_shipped_lines(tiny_collection, tmp_path):
    """A fresh checkout has only the .gz files: new lines go after the shipped ones."""
    import gzip
    import shutil

    from cdmpp.collect import remeasure

    _, summary = tiny_collection
    dev = tmp_path / summary.device_id
    shutil.copytree(summary.device_dir, dev)
    remeasure(dev, sample=2, progress=False)
    ds.pack(dev)
    for plain in dev.glob("*.json*"):
        if plain.suffix != ".gz" and plain.name != ds.MANIFEST_FILE:
            plain.unlink()  # as on a clean checkout of the shipped dataset
    shipped = gzip.open(dev / (ds.REMEASURE_FILE + ".gz"), "rt").read().splitlines()
    path = remeasure(dev, sample=3, progress=False)
    lines = path.read_text().splitlines()
    assert lines[:2] == shipped and len(lines) == 3
    ds.pack(dev)
    assert gzip.open(dev / (ds.REMEASURE_FILE + ".gz"), "rt").read().splitlines() == lines

def test_tasks_sharing_a_workload_under_other_block_names_replay(tmp_path, monkeypatch):
    """Two networks' tasks that are structurally equal but name their blocks differently
    share one workload; every stored trace must replay on it (TVM's JSONDatabase opens
    the files) and the evolutionary phase must not fail on the other task's names."""
    from tvm.script import tirx as T

    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task
    from cdmpp.tvm_compat import IRModule, JSONDatabase

    def rowsum(block: str):
        @T.prim_func(s_tir=True)
        def f(A: T.Buffer((64, 128), "float32"), S: T.Buffer((64,), "float32")):
            for i, k in T.grid(64, 128):
                with T.sblock(block):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        S[vi] = T.float32(0)
                    S[vi] = S[vi] + A[vi, vk]

        return IRModule({"main": f.with_attr("global_symbol", "main")})

    @T.prim_func(s_tir=True)
    def scale(A: T.Buffer((64, 128), "float32"), B: T.Buffer((64, 128), "float32")):
        for i, j in T.grid(64, 128):
            with T.sblock("B"):
                vi, vj = T.axis.remap("SS", [i, j])
                B[vi, vj] = A[vi, vj] * T.float32(2)

    tasks = {  # committed in network order (rowsum "red_a" first), visited round-robin ("red_b" first)
        "dcgan-b1": [
            Task("scale", 1, IRModule({"main": scale.with_attr("global_symbol", "main")}), network="dcgan-b1", flops=8192.0),
            Task("rowsum", 1, rowsum("red_a"), network="dcgan-b1", flops=8192.0),
        ],
        "resnet_18-b1": [Task("rowsum", 1, rowsum("red_b"), network="resnet_18-b1", flops=8192.0)],
    }
    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _target: tasks[n])
    cfg = CollectConfig(
        networks=["dcgan-b1", "resnet_18-b1"],
        out_dir=tmp_path,
        programs_per_task=4,
        batch_size=4,
        evolutionary_fraction=0.5,
        evolutionary_population=16,
        measure=MeasureConfig(repeat=3),
    )
    summary = collect(cfg, progress=False)
    dev = summary.device_dir
    assert len((dev / ds.WORKLOAD_FILE).read_text().splitlines()) == 2  # the two rowsums are one workload
    db = JSONDatabase(str(dev / ds.WORKLOAD_FILE), str(dev / ds.RECORD_FILE), allow_missing=False)
    records = db.get_all_tuning_records()
    assert len(records) == summary.measured
    for r in records:  # each trace replays on the workload it is filed under
        r.as_measure_candidate()
    shared = [t for t in ds.read_manifest(dev)["tasks"] if t["task_name"] == "rowsum"]
    assert len({t["workload_key"] for t in shared}) == 1
    # the shared workload went through both phases: 2 random programs, then 2 from evolution
    assert [t.get("random_programs") for t in shared] == [None, 2]
    key = shared[0]["workload_key"]
    assert sum(1 for r in records if str(r.workload.as_json()[0]) == key) == 4

def test_an_error_in_one_task_skips_that_task_not_the_collection(tmp_path, monkeypatch):
    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import loop as loop_mod

    real = loop_mod.make_tune_context
    calls = []

    def failing_first(task, *args, **kwargs):
        calls.append(task.name)
        if task.name == calls[0]:
            raise RuntimeError("ScheduleError: boom in the first task")
        return real(task, *args, **kwargs)

    monkeypatch.setattr(loop_mod, "make_tune_context", failing_first)
    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=tmp_path,
        programs_per_task=2,
        batch_size=4,
        max_tasks_per_network=2,
        evolutionary_fraction=0.0,
        measure=MeasureConfig(repeat=3),
    )
    first = collect(cfg, progress=False)
    assert first.task_errors == 1 and not first.stopped
    entry = ds.read_manifest(first.device_dir)["collections"][-1]
    (err,) = entry["task_errors"]
    assert err["task_name"] == calls[0] and "boom in the first task" in err["error"]
    assert entry["ended"] and entry["measured"] == first.measured == 2  # the second task was measured
    monkeypatch.setattr(loop_mod, "make_tune_context", real)
    again = collect(cfg, progress=False)  # the next collection tries the skipped task again
    assert again.task_errors == 0 and again.measured == 2
    keys, db = program_keys(first.device_dir)
    assert len(db.programs) == 4 and len(set(keys)) == 4

def test_a_gather_is_measured_and_earlier_failures_can_be_retried(tmp_path, monkeypatch):
    """TVM's default fill puts out-of-range indices in a gather's ``int64`` input and the
    runner crashes; in-range indices make it a real measurement, and ``retry_failed``
    times the programs that failed before."""
    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.collect import timing as timing_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(
        sampling_mod, "extract_network_tasks", lambda n, _t: [Task("take", 1, gather_module(), network=n, flops=0.0)]
    )
    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=tmp_path,
        programs_per_task=2,
        batch_size=2,
        evolutionary_fraction=0.0,
        measure=MeasureConfig(repeat=3),
    )
    real = timing_mod.index_bounds
    monkeypatch.setattr(timing_mod, "index_bounds", lambda mod: ())  # as before: TVM's fill everywhere
    crashed = collect(cfg, progress=False)
    assert crashed.measured == 0 and crashed.failed >= 1
    dev = crashed.device_dir
    lines = [json.loads(s) for s in (dev / ds.FAILURE_FILE).read_text().splitlines()]
    assert {o["stage"] for o in lines} == {"run"}
    monkeypatch.setattr(timing_mod, "index_bounds", real)
    assert collect(cfg, progress=False).measured == 0  # failed programs are not timed again by default
    again = collect(dataclasses.replace(cfg, retry_failed=True), progress=False)
    assert again.measured >= 1 and again.failed == 0
    db = ds.load_device_dir(dev)
    assert len(db.programs) == again.measured and all(np.all(p.run_secs > 0) for p in db.programs)
    assert len((dev / ds.FAILURE_FILE).read_text().splitlines()) == len(lines)  # the history is kept
    assert "[0, extent of the dimension they index)" in ds.read_manifest(dev)["inputs"]

def test_a_stop_signal_inside_a_tvm_call_is_recorded_as_stopped_early(tiny_collection, tmp_path, monkeypatch):
    import shutil

    from cdmpp.collect import loop as loop_mod

    cfg, summary = tiny_collection
    out = tmp_path / "ds"
    shutil.copytree(cfg.out_dir, out)
    requests = []

    def visit(self, task, goal):  # SIGTERM lands inside TVM: it comes back as a RuntimeError
        requests.append(15)
        raise RuntimeError("signal 15 inside a TVM callback")

    monkeypatch.setattr(loop_mod._Collection, "visit", visit)
    with pytest.raises(RuntimeError, match="signal 15"):
        collect(dataclasses.replace(cfg, out_dir=out, programs_per_task=8), progress=False,
                should_stop=lambda: bool(requests))
    entry = json.loads((out / summary.device_id / ds.MANIFEST_FILE).read_text())["collections"][-1]
    assert entry["stopped_early"] is True and entry["measured"] == 0 and "task_errors" not in entry
