import dataclasses
import json

import numpy as np
import pytest

from cdmpp import dataset as ds
from cdmpp.collect import collect
from cdmpp.errors import InputError
from cdmpp.tuning.cost_model import CdmppCostModel


def _program_keys(device_dir):
    from cdmpp.collect.store import program_hash_key
    from cdmpp.featurize import as_module

    db = ds.load_device_dir(device_dir)
    return [(db.workload_keys[p.workload_index], program_hash_key(as_module(p.record))) for p in db.programs], db


def test_tiny_real_collection(tiny_collection):
    cfg, summary = tiny_collection
    assert summary.measured + summary.failed >= 6
    keys, db = _program_keys(summary.device_dir)
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
    assert "us per kernel call" in ds.card(summary.device_dir)
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
    assert "Timing protocols: cold" in ds.card(d) and "| dcgan |" in ds.card(d)
    copy = tmp_path / d.name
    shutil.copytree(d, copy)
    (copy / ds.WARM_RECORD_FILE).unlink()
    cold_only = ds.load_device_dir(copy)
    assert len(cold_only.programs) == len(db.programs) and all(np.isnan(p.warm_latency) for p in cold_only.programs)


def test_held_out_networks_workloads_are_never_collected(tmp_path, no_held_out_extraction, monkeypatch):
    """A task whose workload a held-out network has (by structural hash) is neither listed nor
    measured; the manifest names it and keeps the held-out keys for the next run."""
    import cdmpp.collect.sampling as sampling
    from cdmpp.collect import CollectConfig, collect

    monkeypatch.setattr(sampling, "held_out_workloads", no_held_out_extraction)
    cfg = CollectConfig(networks=["dcgan-b1", "dcgan-b8"], out_dir=tmp_path, programs_per_task=1, batch_size=2,
                        evolutionary_fraction=0.0, held_out=("dcgan-b1",), max_tasks_per_network=1)
    s = collect(cfg, progress=False)
    m = json.loads((s.device_dir / ds.MANIFEST_FILE).read_text())
    held = set(m["held_out"]["workloads"]["dcgan-b1"])
    left = m["collections"][-1]["held_out_tasks"]
    assert len(held) == 5 and len(left) == 5 and all(name.startswith("dcgan-b1:") for name in left)
    assert {t["network"] for t in m["tasks"]} == {"dcgan-b8"} and not {t["workload_key"] for t in m["tasks"]} & held
    assert s.measured == 1  # the other network is still collected


def test_resume_continues_without_duplicates(tiny_collection, tmp_path):
    import shutil

    cfg, summary = tiny_collection
    out = tmp_path / "ds"
    shutil.copytree(cfg.out_dir, out)
    dev = out / summary.device_id
    # a collection killed mid-write leaves a truncated last line: it is moved aside, not lost
    with open(dev / ds.RECORD_FILE, "a", encoding="utf-8") as f:
        f.write('[0, [[["GetSBlock"')
    before, _ = _program_keys(dev)
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
    more.measured += stopped.measured
    after, db = _program_keys(dev)
    assert after[: len(before)] == before  # nothing finished is lost
    assert len(after) == len(before) + more.measured
    assert len(set(after)) == len(after)  # nothing duplicated
    per_task = {}
    for k, _ in after:
        per_task[k] = per_task.get(k, 0) + 1
    assert max(per_task.values()) <= 4  # programs_per_task is honoured
    assert (dev / (ds.RECORD_FILE + ".corrupt")).read_text().startswith('[0, [[["GetSBlock"')


def test_new_workloads_only_skips_what_another_device_folder_measured(tiny_collection, tmp_path):
    import shutil

    cfg, summary = tiny_collection
    out = tmp_path / "ds"
    other = out / "cpu-another_machine"
    shutil.copytree(summary.device_dir, other)
    db = ds.load_device_dir(other)
    measured = {db.workload_keys[p.workload_index] for p in db.programs}
    assert ds.measured_workload_keys(other) == measured and len(measured) == 2
    # a failed run (MetaSchedule's 1e10) is no measurement: a workload with only that is not known
    lines = (other / ds.RECORD_FILE).read_text().splitlines()
    first = json.loads(lines[0])[0]
    kept = [ln for ln in lines if json.loads(ln)[0] != first]
    failed = json.loads(lines[0])
    failed[1][1] = [1e10]
    (other / ds.RECORD_FILE).write_text("\n".join(kept + [json.dumps(failed)]) + "\n")
    assert ds.measured_workload_keys(other) == measured - {db.workload_keys[first]}
    shutil.copy(other / ds.RECORD_FILE, tmp_path / "edited")
    shutil.copy(summary.device_dir / ds.RECORD_FILE, other / ds.RECORD_FILE)

    s = collect(dataclasses.replace(cfg, out_dir=out, new_workloads_only=True), progress=False)
    assert s.measured == 0 and s.failed == 0  # both workloads are the other folder's
    m = json.loads((out / summary.device_id / ds.MANIFEST_FILE).read_text())
    assert m["collections"][-1]["new_workloads_only"] == {"skipped_tasks": 2}
    assert {t["workload_key"] for t in m["tasks"]} >= measured  # the skipped tasks stay listed
    shutil.copy(tmp_path / "edited", other / ds.RECORD_FILE)  # now one of the two is unknown
    s = collect(dataclasses.replace(cfg, out_dir=out, new_workloads_only=True), progress=False)
    assert 0 < s.measured <= cfg.programs_per_task
    assert ds.measured_workload_keys(out / summary.device_id) == {db.workload_keys[first]}


def test_a_later_round_with_more_programs_per_task_samples_new_ones(tiny_collection, tmp_path):
    import shutil

    cfg, summary = tiny_collection
    out = tmp_path / "ds"
    shutil.copytree(cfg.out_dir, out)
    dev = out / summary.device_id
    before, _ = _program_keys(dev)
    # rounds smaller than the programs already measured: a sampler replaying the first
    # round's seed would see only duplicates and take the design space for used up
    more = collect(dataclasses.replace(cfg, out_dir=out, programs_per_task=6, batch_size=2), progress=False)
    after, _ = _program_keys(dev)
    per_task = {}
    for k, _ in after:
        per_task[k] = per_task.get(k, 0) + 1
    assert sorted(per_task.values()) == [6, 6] and more.measured == 12 - len(before)
    assert after[: len(before)] == before and len(set(after)) == len(after)
    run = json.loads((dev / ds.MANIFEST_FILE).read_text())["collections"][-1]
    assert "programs measured before the visit" in run["task_seed"]


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


def test_evolutionary_phase_follows_random_and_restart_reuses_tasks(tmp_path, monkeypatch):
    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.collect import store as store_mod

    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=tmp_path,
        programs_per_task=4,
        batch_size=4,
        max_tasks_per_network=1,
        evolutionary_fraction=0.5,
        evolutionary_population=16,
        measure=MeasureConfig(repeat=3),
    )
    first = collect(cfg, progress=False)
    m = json.loads((first.device_dir / ds.MANIFEST_FILE).read_text())
    task = m["tasks"][0]
    assert task["random_programs"] == 2  # the evolutionary phase began after 2 random samples
    assert m["networks"] == {"dcgan-b1": {"tasks": 5, "family": "dcgan"}} and m["sampling"]["evolutionary_fraction"] == 0.5
    assert first.measured == len(ds.load_device_dir(first.device_dir).programs) >= 3

    def no_extraction(*_):
        raise AssertionError("a restart must reuse the task list in the manifest")

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", no_extraction)
    # two rounds in one run: the second visit neither replays the measured programs for
    # their structural hashes nor retrains a new XGBModel on them, it reuses the first's
    misses, models = [], []
    keys_of, tune_context = store_mod.DatasetStore.measured_program_keys, loop_mod.make_tune_context

    def counted_keys(self, wl, key=None):
        misses.append(key not in self._program_keys)
        return keys_of(self, wl, key)

    def kept_models(*args, **kwargs):
        ctx, model = tune_context(*args, **kwargs)
        models.append(model)
        return ctx, model

    monkeypatch.setattr(store_mod.DatasetStore, "measured_program_keys", counted_keys)
    monkeypatch.setattr(loop_mod, "make_tune_context", kept_models)
    again = collect(dataclasses.replace(cfg, rounds=(5, 6)), progress=False)
    assert misses == [True, False]
    evo = [m for m in models if m is not None]
    assert len(evo) == 2 and evo[0] is evo[1]
    assert again.stage_seconds["cost model features"] > 0  # TVM's PerStoreFeature, timed on its own
    keys, db = _program_keys(first.device_dir)
    assert len(db.programs) == first.measured + again.measured and len(set(keys)) == len(keys)


def test_the_tuned_phase_adds_a_tuners_programs_to_the_largest_task(tmp_path):
    """The fast-end policy: the largest visited task by weight x FLOPs gets its round's random
    programs, then ``tuned_programs`` more from an evolutionary search guided by the plugin."""
    from cdmpp.collect import TUNED_POLICY, CollectConfig, MeasureConfig

    cfg = CollectConfig(networks=["dcgan-b1"], out_dir=tmp_path, programs_per_task=3, batch_size=4,
                        max_tasks_per_network=2, evolutionary_fraction=0.0, measure=MeasureConfig(repeat=3),
                        tuned_tasks=1, tuned_programs=4, tuned_guide="cdmpp", tuned_population=16)
    with pytest.raises(InputError, match="needs the plugin as guide="):
        collect(cfg, progress=False)
    run = collect(cfg, progress=False, guide=CdmppCostModel.guide())
    m = json.loads((run.device_dir / ds.MANIFEST_FILE).read_text())
    db = ds.load_device_dir(run.device_dir)
    counts = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workload_keys))
    by_key = dict(zip(db.workload_keys, counts))
    visited = [t for t in m["tasks"] if by_key.get(t["workload_key"], 0)]
    assert len(visited) == 2
    tuned = [t for t in visited if "tuned_from" in t]
    assert len(tuned) == 1 and tuned[0]["tuned_from"] == 3 and by_key[tuned[0]["workload_key"]] == 3 + 4
    other = next(t for t in visited if "tuned_from" not in t)
    assert by_key[other["workload_key"]] == 3
    assert tuned[0]["weight"] * tuned[0]["flops"] >= other["weight"] * other["flops"]
    assert m["collections"][-1]["tuned"] == {"tasks_per_network": 1, "programs": 4, "guide": "cdmpp",
                                             "checkpoint": None, "population": 16}
    assert m["sampling"]["tuned_policy"] == TUNED_POLICY
    keys, _ = _program_keys(run.device_dir)
    assert len(set(keys)) == len(keys) == run.measured == 3 + 3 + 4


def test_tuned_only_visits_the_tuned_tasks_alone_and_skips_a_named_network(tmp_path):
    """``tuned_only`` measures the largest task alone (its round, then the tuned phase) on a new
    folder; a skipped network named among the networks needs no earlier collection, and its
    workloads are never tuned, nor measured."""
    from cdmpp.collect import CollectConfig, MeasureConfig

    cfg = CollectConfig(networks=["dcgan-b1"], out_dir=tmp_path, programs_per_task=2, batch_size=4,
                        max_tasks_per_network=3, evolutionary_fraction=0.0, measure=MeasureConfig(repeat=3),
                        tuned_tasks=1, tuned_programs=3, tuned_population=16, tuned_only=True)
    run = collect(cfg, progress=False)
    m = json.loads((run.device_dir / ds.MANIFEST_FILE).read_text())
    db = ds.load_device_dir(run.device_dir)
    counts = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workload_keys))
    measured = [k for k, c in zip(db.workload_keys, counts) if c]
    listed = [t for t in m["tasks"] if t["network"] == "dcgan-b1"]
    assert len(listed) > 1 and len(measured) == 1 and run.measured == 2 + 3
    largest = max(listed[:3], key=lambda t: t["weight"] * t["flops"])
    assert measured == [largest["workload_key"]] and largest["tuned_from"] == 2
    assert m["collections"][-1]["tuned"]["only"] is True
    with pytest.raises(InputError, match="tuned_only"):
        CollectConfig(networks=["dcgan-b1"], out_dir=tmp_path, tuned_only=True)
    skipping = dataclasses.replace(cfg, out_dir=tmp_path / "skip", tuned_skip_networks=("dcgan-b1",))
    assert collect(skipping, progress=False).measured == 0


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
    assert "Run-to-run drift of the median, 2 programs" in ds.card(dev)


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


def test_cuda_programs_sample_and_build_to_source_without_a_gpu(cuda_schedules, tmp_path):
    """Issue 3: GPU programs are sampled and built here; only their timing needs the GPU."""
    import shutil
    import subprocess

    from cdmpp.tvm_compat import build_for_measurement, imported_source, structural_hash

    target, schedules = cuda_schedules
    assert len(schedules) == 8
    assert len({structural_hash(s.mod) for s in schedules}) >= 6  # distinct random schedules
    src = imported_source(build_for_measurement(schedules[0].mod, target))
    assert "__global__" in src and "blockIdx.x" in src and "threadIdx.x" in src
    if shutil.which("nvcc"):  # the generated CUDA compiles for the H100 (sm_90a) with the toolkit here
        (tmp_path / "k.cu").write_text(src)
        out = subprocess.run(
            ["nvcc", "--fatbin", "-arch=sm_90a", "-O3", "-o", str(tmp_path / "k.fatbin"), str(tmp_path / "k.cu")],
            capture_output=True,
            text=True,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert (tmp_path / "k.fatbin").stat().st_size > 1000


def test_gpu_collection_without_a_gpu_fails_first_and_writes_nothing(tmp_path):
    import pytest
    import tvm

    from cdmpp.collect import CollectConfig
    from cdmpp.device import DeviceUnavailableError

    if tvm.cuda(0).exist:
        pytest.skip("this host has a GPU")
    with pytest.raises(DeviceUnavailableError, match="timing them needs the GPU"):
        collect(CollectConfig(networks=["dcgan-b1"], out_dir=tmp_path / "ds", gpu=True), progress=False)
    assert not (tmp_path / "ds").exists()


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
    keys, db = _program_keys(first.device_dir)
    assert len(db.programs) == 4 and len(set(keys)) == 4


def _gather_module(rows: int = 4096):
    """``out[i, j] = table[ids[i], j]``: an embedding lookup (``take``) as Relax lowers it."""
    from tvm.script import tirx as T

    from cdmpp.tvm_compat import IRModule

    @T.prim_func(s_tir=True)
    def gather(
        table: T.Buffer((rows, 64), "float32"), ids: T.Buffer((256,), "int64"), out: T.Buffer((256, 64), "float32")
    ):
        for i, j in T.grid(256, 64):
            with T.sblock("T_take"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = table[ids[vi], vj]

    return IRModule({"main": gather.with_attr("global_symbol", "main")})


def test_evolutionary_sampling_without_xgboost_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """A host without xgboost (the GPU hosts) gets one clear error naming the way out,
    not a failed evolutionary phase in every task."""
    import importlib.util

    import pytest

    from cdmpp.collect import CollectConfig, collect
    from cdmpp.errors import InputError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a))
    cfg = CollectConfig(networks=["dcgan-b1"], out_dir=tmp_path / "d", evolutionary_fraction=0.5)
    with pytest.raises(InputError, match="needs the xgboost package.*--evolutionary-fraction 0"):
        collect(cfg, progress=False)
    assert not (tmp_path / "d").exists()


def test_random_only_collection_never_starts_the_evolutionary_phase(tmp_path, monkeypatch):
    """With evolutionary_fraction 0, a task whose random phase falls short stays short:
    no XGBoost-guided search (which an H200 collection without xgboost failed on)."""
    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import loop as loop_mod

    phases = []
    real = loop_mod._Collection._phase

    def short_random(self, task, wl, phase, want, *args):
        phases.append(phase)
        return real(self, task, wl, phase, want - 1 if phase == "random" else want, *args)

    monkeypatch.setattr(loop_mod._Collection, "_phase", short_random)
    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=tmp_path,
        programs_per_task=2,
        batch_size=4,
        max_tasks_per_network=1,
        evolutionary_fraction=0.0,
        measure=MeasureConfig(repeat=3),
    )
    summary = collect(cfg, progress=False)
    assert phases == ["random"] and summary.measured == 1 and summary.task_errors == 0


def test_index_bounds_are_the_extents_the_indices_address():
    from programs import vector_add
    from tvm.script import tirx as T

    from cdmpp.collect import index_bounds

    @T.prim_func(s_tir=True)
    def class_token(x: T.Buffer((4, 197, 768), "float32"), k: T.Buffer((), "int64"), y: T.Buffer((4, 768), "float32")):
        for a, b in T.grid(4, 768):
            with T.sblock("T_take"):
                va, vb = T.axis.remap("SS", [a, b])
                y[va, vb] = x[va, k[()], vb]

    assert index_bounds(_gather_module(4096)) == ((1, 4096),)
    assert index_bounds(class_token) == ((1, 197),)  # the middle axis, not the batch of 4
    assert index_bounds(vector_add) == ()  # no integer argument: TVM's own fill


def test_a_gather_is_measured_and_earlier_failures_can_be_retried(tmp_path, monkeypatch):
    """TVM's default fill puts out-of-range indices in a gather's ``int64`` input and the
    runner crashes; in-range indices make it a real measurement, and ``retry_failed``
    times the programs that failed before."""
    from cdmpp.collect import CollectConfig, MeasureConfig
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.collect import timing as timing_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(
        sampling_mod, "extract_network_tasks", lambda n, _t: [Task("take", 1, _gather_module(), network=n, flops=0.0)]
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


def _tiny_add_module():
    """``B = A + 1`` on 4 floats: a design space with one distinct schedule."""
    from tvm.script import tirx as T

    from cdmpp.tvm_compat import IRModule

    @T.prim_func(s_tir=True)
    def add(A: T.Buffer((4,), "float32"), B: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("B"):
                vi = T.axis.remap("S", [i])
                B[vi] = A[vi] + T.float32(1)

    return IRModule({"main": add.with_attr("global_symbol", "main")})


def _matmul_module():
    """A 32x32x32 matmul: a design space with many distinct schedules."""
    from tvm.script import tirx as T

    from cdmpp.tvm_compat import IRModule

    @T.prim_func(s_tir=True)
    def mm(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
        for i, j, k in T.grid(32, 32, 32):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return IRModule({"main": mm.with_attr("global_symbol", "main")})


def _tiny_cfg(tmp_path, **kw):
    from cdmpp.collect import CollectConfig, MeasureConfig

    base = dict(networks=["dcgan-b1"], out_dir=tmp_path, programs_per_task=2, batch_size=2,
                evolutionary_fraction=0.0, measure=MeasureConfig(repeat=3))
    return CollectConfig(**{**base, **kw})


def test_a_used_up_design_space_is_marked_and_skipped_by_later_rounds(tmp_path, monkeypatch):
    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("add", 1, _tiny_add_module(), network=n, flops=4.0)])
    first = collect(_tiny_cfg(tmp_path, programs_per_task=4), progress=False)
    assert first.measured == 1  # the space has one program
    (task,) = ds.read_manifest(first.device_dir)["tasks"]
    assert task["space_exhausted_at"] == 1
    real, visits = loop_mod.make_tune_context, []
    monkeypatch.setattr(loop_mod, "make_tune_context", lambda *a, **k: visits.append(a[0]) or real(*a, **k))
    later = collect(_tiny_cfg(tmp_path, rounds=(8, 16)), progress=False)
    assert later.measured == 0 and later.skipped_duplicates == 0 and visits == []
    again = collect(_tiny_cfg(tmp_path, programs_per_task=8, retry_exhausted=True), progress=False)
    assert again.measured == 0 and len(visits) >= 1  # visited on request, and found used up again


def test_rounds_grow_every_task_in_one_run_and_the_stages_are_timed(tmp_path, monkeypatch):
    from cdmpp.collect import STAGES
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, _matmul_module(), network=n, flops=65536.0)])
    summary = collect(_tiny_cfg(tmp_path, rounds=(1, 3)), progress=False)
    assert summary.measured == 3
    entry = ds.read_manifest(summary.device_dir)["collections"][-1]
    assert entry["rounds"] == [1, 3] and entry["measured"] == 3
    assert list(entry["stage_seconds"]) == list(STAGES) == list(summary.stage_seconds)
    for stage in ("building", "timing", "random sampling", "argument allocation", "runner start-up"):
        assert entry["stage_seconds"][stage] > 0, stage
    timings = entry["quiet_machine"]["timings"]  # CI may be busy: batches timed again are counted, not absent
    assert sum(t[2] for t in timings) >= 2
    assert entry["quiet_machine"]["retimed_batches"] == sum(1 - t[2] for t in timings)
    builds = entry["build_seconds"]  # each finished build's worker time
    assert builds["built"] == 3 and builds["timeouts"] == 0 and 0 < builds["median_s"] <= builds["max_s"] < 60


def test_the_quiet_machine_guard_waits_for_a_busy_process_to_end(tmp_path, monkeypatch):
    """A busy loop outside the collector's process tree holds every timing until it ends."""
    import subprocess
    import sys
    import time

    from cdmpp.collect import QuietConfig
    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, _matmul_module(), network=n, flops=65536.0)])
    from cdmpp.device import local_cpu
    from cdmpp.tvm_compat import load_tensor_intrinsics

    load_tensor_intrinsics(local_cpu().target)
    busy_s = 6.0
    # started through a shell that exits at once, so the loop is no descendant of this process
    loop = f"import time\nt = time.time()\nwhile time.time() - t < {busy_s}: pass"
    real_finish, started = loop_mod.finish_batch, []

    def finish_beside_a_busy_loop(bench, batch):  # the loop starts once the first batch is built
        if not started:
            batch.builds = [f.result() for f in batch.builds]
            started.append(time.time())
            pid = subprocess.run(["bash", "-c", f"{sys.executable} -c '{loop}' >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, check=True).stdout.strip()
            assert pid.isdigit()
        return real_finish(bench, batch)

    monkeypatch.setattr(loop_mod, "finish_batch", finish_beside_a_busy_loop)
    summary = collect(_tiny_cfg(tmp_path, quiet=QuietConfig(settle_s=0.5, max_wait_s=120)), progress=False)
    start = started[0]
    ended = start + busy_s
    assert summary.measured == 2
    q = ds.read_manifest(summary.device_dir)["collections"][-1]["quiet_machine"]
    kept = [t for t, _, k in q["timings"] if k]
    assert kept and min(kept) >= ended - 1.0  # every kept timing started after the loop ended
    # it waited, or timed a disturbed batch again (the loop may have started after a quiet check)
    assert summary.stage_seconds["quiet-machine wait"] > 1.0 or q["retimed_batches"] >= 1


def test_a_tuning_runner_times_a_disturbed_batch_again():
    """``quiet_runner`` (the tuning benchmark's runner) keeps only a batch timed while
    other processes stayed under the threshold."""
    from cdmpp.collect import QuietConfig, QuietGuard, quiet_runner
    from cdmpp.tvm_compat import ms

    guard = QuietGuard(QuietConfig(settle_s=0.01))
    busy = {"now": False}  # other processes: busy during the first timing only

    def cores_between(_start, _end):
        load, busy["now"] = (2.0 if busy["now"] else 0.0), False
        return load

    guard.cores_between = cores_between
    calls = []

    class Inner:  # a runner that times a batch before ``run`` returns, as LocalRunner does
        def run(self, inputs):
            calls.append(len(inputs))
            busy["now"] = len(calls) == 1
            return [ms.runner.LocalRunnerFuture([1e-3 * len(calls)], None) for _ in inputs]

    runner = quiet_runner(Inner(), guard)
    futures = runner.run([ms.runner.RunnerInput(f"/nonexistent/{i}.so", "cpu", []) for i in range(3)])
    assert calls == [3, 3] and guard.retimed == 1
    assert [kept for _, _, kept in guard.batches] == [False, True]
    assert [[float(x) for x in f.result().run_secs] for f in futures] == [[2e-3]] * 3  # the second timing

    off = QuietGuard(QuietConfig(enabled=False))  # --allow-busy: timed once, nothing checked
    calls.clear()
    quiet_runner(Inner(), off).run([ms.runner.RunnerInput("/nonexistent/0.so", "cpu", [])])
    assert calls == [1] and off.batches == []


def test_a_stop_signal_inside_a_tvm_call_is_recorded_as_stopped_early(tiny_collection, tmp_path, monkeypatch):
    import shutil

    import pytest

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


def test_a_stage_nested_in_another_counts_for_itself_only(monkeypatch):
    import time

    from cdmpp.collect import StageClock

    clock = StageClock()
    ticks = iter([0.0, 1.0, 3.0, 10.0, 20.0, 21.0])  # outer in, inner in, inner out, outer out; a plain stage
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks))
    with clock.stage("evolutionary search"):
        with clock.stage("cost model features"):
            pass
    with clock.stage("building"):
        pass
    monkeypatch.undo()
    assert clock.seconds["evolutionary search"] == 8.0 and clock.seconds["cost model features"] == 2.0
    assert clock.seconds["building"] == 1.0 and sum(clock.seconds.values()) == 11.0


def test_build_workers_pause_for_timings_and_a_build_stops_at_its_cpu_time_limit():
    """Paused workers are stopped and use no CPU (no worker starts while paused); a build
    past its CPU-time limit is a timed-out build, and the next build gets a new worker."""
    import time

    import psutil

    from cdmpp.collect import PooledBuilder
    from cdmpp.tvm_compat import (
        BuilderInput,
        Target,
        build_for_measurement,
        export_shared_library,
    )

    target = Target({"kind": "llvm", "num-cores": 1})
    mod = _matmul_module()
    builder = PooledBuilder(1, 20.0, build_for_measurement, f_export=export_shared_library)
    others = set(psutil.Process().children(recursive=True))  # an earlier test's runner worker, say
    try:
        with builder.paused():
            futures = builder.submit([BuilderInput(mod, target)] * 2)
            time.sleep(1.0)
            assert set(psutil.Process().children(recursive=True)) == others  # queued, not started
        assert all(f.result().error_msg is None for f in futures)
        futures = builder.submit([BuilderInput(mod, target)] * 3)
        with builder.paused():
            procs = [p for p in builder._processes() if p.status() != psutil.STATUS_ZOMBIE]  # an ended linker
            assert procs and all(p.status() == psutil.STATUS_STOPPED for p in procs)
            before = sum(sum(p.cpu_times()[:2]) for p in procs)
            time.sleep(1.0)
            assert sum(sum(p.cpu_times()[:2]) for p in procs) == before
        assert all(f.result().error_msg is None for f in futures)
        assert builder.to_json()["built"] == 5 and builder.paused_s >= 2.0
        builder.timeout_sec = 1e-3
        late = builder.build([BuilderInput(mod, target)])[0]
        assert late.artifact_path is None and "timed out after 0.001 s of CPU time" in late.error_msg
        builder.timeout_sec = 20.0
        assert builder.build([BuilderInput(mod, target)])[0].error_msg is None and builder.timeouts == 1
    finally:
        builder.close()
    assert set(psutil.Process().children(recursive=True)) <= others


def test_closing_the_builder_while_builds_run_ends_every_worker_without_error():
    """A stop signal closes the builder while its threads wait on running builds: each
    thread sees its worker die and ends it too (TVM's ``PopenWorker.kill`` raised when two
    threads ended one worker, and the manifest lost the collection's end)."""
    import time

    import psutil

    from cdmpp.collect import PooledBuilder
    from cdmpp.tvm_compat import (
        BuilderInput,
        Target,
        build_for_measurement,
        export_shared_library,
    )

    target = Target({"kind": "llvm", "num-cores": 1})
    mod = _matmul_module()
    others = set(psutil.Process().children(recursive=True))
    builder = PooledBuilder(2, 20.0, build_for_measurement, f_export=export_shared_library)
    for _ in range(2):
        futures = builder.submit([BuilderInput(mod, target)] * 4)
        deadline = time.time() + 30
        while len(set(psutil.Process().children(recursive=True)) - others) < 2 and time.time() < deadline:
            time.sleep(0.05)  # both workers started: their builds are running
        builder.close()
        results = [f.result() for f in futures if not f.cancelled()]
        assert all(r.error_msg is None or "closed" in r.error_msg for r in results)
        assert set(psutil.Process().children(recursive=True)) <= others


def test_sampling_threads_share_the_cores_with_the_builds():
    from cdmpp.collect import sampling_threads

    assert sampling_threads(2, 1) == 2 and sampling_threads(2, 2) == 1
    assert sampling_threads(16, 2) == 8 and sampling_threads(1, 2) == 1


def test_one_task_builds_while_another_samples_and_nothing_builds_during_a_timing(tmp_path, monkeypatch):
    """Two tasks are in flight: the second task's batch is queued before the first one's is
    timed, and every timing finds the build workers stopped."""
    import psutil

    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import timing as timing_mod

    events = []
    real_submit, real_finish, real_run = loop_mod.submit_batch, loop_mod.finish_batch, timing_mod._run_batch

    def submit(bench, fresh):
        events.append(("submit", len(fresh)))
        return real_submit(bench, fresh)

    def finish(bench, batch):
        events.append(("time", len(batch.fresh)))
        return real_finish(bench, batch)

    def status(p):
        try:
            return p.status()
        except psutil.NoSuchProcess:
            return psutil.STATUS_DEAD

    def run(bench, items, bounds, warm=False):
        procs = bench.builder._processes()
        assert procs  # the workers exist, so the check below is not vacuous
        states = [status(p) for p in procs]
        assert all(s in (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD) for s in states), states
        return real_run(bench, items, bounds, warm)

    monkeypatch.setattr(loop_mod, "submit_batch", submit)
    monkeypatch.setattr(loop_mod, "finish_batch", finish)
    monkeypatch.setattr(timing_mod, "_run_batch", run)
    summary = collect(_tiny_cfg(tmp_path, max_tasks_per_network=2), progress=False)
    assert summary.measured == 4 and summary.failed == 0
    assert [e for e, _ in events] == ["submit", "submit", "time", "time"]
    records = ds.load_device_dir(summary.device_dir).programs
    assert len(records) == 4 and len({p.workload_index for p in records}) == 2


def test_adaptive_repeats_stop_early_only_when_the_first_repeats_agree(tmp_path, monkeypatch):
    from cdmpp.collect import MeasureConfig
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, _matmul_module(), network=n, flops=65536.0)])
    # any spread is small enough and any program slow enough: every program stops after 2 repeats
    early = MeasureConfig(repeat=6, adaptive_repeats=2, adaptive_min_s=0.0, adaptive_max_spread=10.0)
    s = collect(_tiny_cfg(tmp_path / "early", programs_per_task=3, measure=early), progress=False)
    db = ds.load_device_dir(s.device_dir)
    assert s.measured == 3 and [len(p.run_secs) for p in db.programs] == [2, 2, 2]
    assert db.manifest["collections"][-1]["measurement"]["adaptive_repeats"] == 2
    # no program is slow enough (1000 s): every program gets every repeat
    never = MeasureConfig(repeat=6, adaptive_repeats=2, adaptive_min_s=1e3, adaptive_max_spread=10.0)
    s = collect(_tiny_cfg(tmp_path / "never", programs_per_task=3, measure=never), progress=False)
    assert [len(p.run_secs) for p in ds.load_device_dir(s.device_dir).programs] == [6, 6, 6]
    assert "- Programs by repeats kept: 6 repeats: 3" in ds.card(s.device_dir)


def test_adaptive_evaluator_times_the_rest_unless_the_first_repeats_agree():
    from cdmpp.collect import MeasureConfig, adaptive_run_evaluator
    from cdmpp.tvm_compat import EvaluatorConfig

    class Device:
        def sync(self):
            pass

    class Module:
        entry_name = "main"

        def __init__(self, runs):
            self.runs, self.calls = list(runs), []

        def time_evaluator(self, func_name, dev, number, repeat, min_repeat_ms, f_preproc):
            self.calls.append(repeat)
            runs = self.runs

            class Result:
                results = [runs.pop(0) for _ in range(repeat)]

            return lambda *args: Result()

    cfg = EvaluatorConfig(number=1, repeat=10, min_repeat_ms=0, enable_cpu_cache_flush=True)
    steady = Module([0.010, 0.0101, 0.0100, 0.0100] + [0.5] * 6)
    assert adaptive_run_evaluator(steady, Device(), cfg, [()], first=4) == [0.010, 0.0101, 0.0100, 0.0100]
    assert steady.calls == [4]
    wide = Module([0.010, 0.0110, 0.0100, 0.0100] + [0.0105] * 6)  # spread 10% > 2%
    assert adaptive_run_evaluator(wide, Device(), cfg, [()], first=4) == [0.010, 0.0110, 0.0100, 0.0100] + [0.0105] * 6
    assert wide.calls == [4, 6]
    fast = Module([0.001] * 10)  # steady but under 2 ms
    assert len(adaptive_run_evaluator(fast, Device(), cfg, [()], first=4)) == 10 and fast.calls == [4, 6]
    assert MeasureConfig(repeat=3).adaptive_repeats is None  # nothing left to skip
    with pytest.raises(InputError, match="adaptive_repeats must be at least 1"):
        MeasureConfig(adaptive_repeats=0)


def test_the_adaptive_repeat_rule_replayed_on_stored_repeats(tmp_path):
    from benchmarks.collect_rate import check_adaptive_repeats

    runs = [
        [0.010, 0.0101, 0.0100, 0.0100] + [0.0102] * 6,  # first 4 agree within 1%: stops, label 0.0100 for 0.0102
        [0.001] * 10,  # under 2 ms: every repeat
        [0.010, 0.012, 0.010, 0.010] + [0.010] * 6,  # first 4 spread 20%: every repeat
        [0.010] * 4,  # not a 10-repeat record: not replayed
    ]
    lines = [json.dumps([0, [[], r, {}, []]]) for r in runs]
    (tmp_path / ds.RECORD_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = check_adaptive_repeats(tmp_path, first=4, min_s=0.002, max_spread=0.02)
    assert r.programs == 3 and r.stopped == pytest.approx(1 / 3)
    assert r.change_median == pytest.approx(0.0002 / 0.0102) and r.change_max == pytest.approx(0.0002 / 0.0102)
    # saved: the stopped program's last 6 repeats, less one warm-up run of each resumed program
    total = sum(sum(x) for x in runs[:3])
    assert r.timing_saved == pytest.approx((6 * 0.0102 - 0.001 - 0.010) / total)
    with pytest.raises(InputError, match="no tuning records with 12 repeats"):
        check_adaptive_repeats(tmp_path, repeat=12)


def test_collect_benchmark_names_its_paths_and_compares_each_of_this_collectors_rows(tmp_path):
    from benchmarks.collect_rate import (
        CollectBenchmarkConfig,
        format_collect_benchmark,
        run_collect_benchmark,
    )

    rows = [
        {"path": "plain TVM", "measured": 400, "per_min": 100.0},
        {"path": "this collector", "measured": 500, "per_min": 125.0},
        {"path": "this collector, random samples only", "measured": 600, "per_min": 150.0},
    ]
    text = format_collect_benchmark(rows)
    assert "this collector / plain TVM: 1.25x" in text
    assert "this collector, random samples only / plain TVM: 1.50x" in text
    assert "plain TVM / " not in text
    with pytest.raises(InputError, match="current-random"):
        run_collect_benchmark(CollectBenchmarkConfig(paths=("plain", "fastest")), tmp_path)
    with pytest.raises(InputError, match="baseline revision"):
        run_collect_benchmark(CollectBenchmarkConfig(paths=("baseline",)), tmp_path)


def test_collect_config_rejects_unusable_settings_for_python_callers_too(tmp_path):
    from cdmpp.collect import CollectConfig, MeasureConfig, QuietConfig, RPCSettings

    ok = dict(networks=["dcgan-b1"], out_dir=tmp_path)
    for bad, match in [
        (dict(rounds=(64, 32)), "increasing"),
        (dict(rounds=(0, 32)), "positive"),
        (dict(networks=[]), "no networks"),
        (dict(batch_size=0), "at least 1"),
        (dict(evolutionary_fraction=1.5), r"\[0, 1\]"),
        (dict(tasks_in_flight=3), "1 or 2"),
        (dict(gpu=True, disable_avx512=True), "CPU device"),
        (dict(tuned_tasks=-1), "tuned_tasks"),
        (dict(tuned_guide="random"), "tuned_guide"),
    ]:
        with pytest.raises(InputError, match=match):
            CollectConfig(**{**ok, **bad})
    assert CollectConfig(**ok, rounds=[32, 64]).rounds == (32, 64)
    with pytest.raises(InputError, match="HOST:PORT"):
        RPCSettings.from_address("nowhere", "key")
    with pytest.raises(InputError, match="device key"):
        RPCSettings.from_address("127.0.0.1:9190", None)
    assert RPCSettings.from_address("127.0.0.1:9190", "k").tracker_port == 9190
    with pytest.raises(InputError, match="repeat"):
        MeasureConfig(repeat=0)
    with pytest.raises(InputError, match="max_other_cores"):
        QuietConfig(max_other_cores=-1)


def test_the_tuned_phase_skips_a_held_out_networks_workloads():
    """A workload that the held-out network shares with a training network is never tuned: the
    next largest task of that network is tuned instead."""
    from cdmpp.collect.sampling import skipped_workloads, tuned_task_keys
    from cdmpp.tasks import Task

    tasks = [Task("big", 2, None, network="net_a", flops=1e9, workload_key="k1"), Task("mid", 1, None, network="net_a", flops=1e9, workload_key="k2"),
             Task("small", 1, None, network="net_a", flops=1e6, workload_key="k3"), Task("only", 1, None, network="net_b", flops=1e6, workload_key="k4")]
    assert tuned_task_keys(tasks, 1) == {"k1", "k4"}
    manifest = {"tasks": [{"network": "held_out", "task_name": "t", "workload_key": "k1"},
                          {"network": "net_a", "task_name": "big", "workload_key": "k1"}]}
    skip = skipped_workloads(manifest, ("held_out",))
    assert skip == {"k1"}
    assert tuned_task_keys(tasks, 1, skip) == {"k2", "k4"}
    assert skipped_workloads(manifest, ()) == set()
    with pytest.raises(InputError, match="'resnet_50-b1' has no tasks"):
        skipped_workloads(manifest, ("resnet_50-b1",))
    from cdmpp.collect.sampling import networks_tasks, round_robin

    late = [Task(f"t{i}", 1, None, network="net_b", flops=1e6, workload_key=f"b{i}") for i in range(3)]
    order = [t.workload_key for t in round_robin(networks_tasks(tasks + late))]
    assert order == ["k1", "k4", "k2", "b0", "k3", "b1", "b2"]
    extracted = [Task("conv", 1, None, network="resnet_50-b1", flops=1e9, workload_key="k9")]
    assert skipped_workloads(manifest, ("resnet_50-b1",), extracted) == {"k9"}
