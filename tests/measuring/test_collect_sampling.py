"""Which programs a collection samples: its phases (random, evolutionary, tuned), rounds, used-up design spaces, held-out and already-measured workloads, and CUDA programs."""

import dataclasses
import json

import numpy as np
import pytest
from support import matmul_module, program_keys, tiny_cfg

from cdmpp import dataset as ds
from cdmpp.collect import collect
from cdmpp.errors import InputError
from cdmpp.tuning.cost_model import CdmppCostModel


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
    before, _ = program_keys(dev)
    # rounds smaller than the programs already measured: a sampler replaying the first
    # round's seed would see only duplicates and take the design space for used up
    more = collect(dataclasses.replace(cfg, out_dir=out, programs_per_task=6, batch_size=2), progress=False)
    after, _ = program_keys(dev)
    per_task = {}
    for k, _ in after:
        per_task[k] = per_task.get(k, 0) + 1
    assert sorted(per_task.values()) == [6, 6] and more.measured == 12 - len(before)
    assert after[: len(before)] == before and len(set(after)) == len(after)
    run = json.loads((dev / ds.MANIFEST_FILE).read_text())["collections"][-1]
    assert "programs measured before the visit" in run["task_seed"]

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
    keys, db = program_keys(first.device_dir)
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
    keys, _ = program_keys(run.device_dir)
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

def test_a_used_up_design_space_is_marked_and_skipped_by_later_rounds(tmp_path, monkeypatch):
    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("add", 1, _tiny_add_module(), network=n, flops=4.0)])
    first = collect(tiny_cfg(tmp_path, programs_per_task=4), progress=False)
    assert first.measured == 1  # the space has one program
    (task,) = ds.read_manifest(first.device_dir)["tasks"]
    assert task["space_exhausted_at"] == 1
    real, visits = loop_mod.make_tune_context, []
    monkeypatch.setattr(loop_mod, "make_tune_context", lambda *a, **k: visits.append(a[0]) or real(*a, **k))
    later = collect(tiny_cfg(tmp_path, rounds=(8, 16)), progress=False)
    assert later.measured == 0 and later.skipped_duplicates == 0 and visits == []
    again = collect(tiny_cfg(tmp_path, programs_per_task=8, retry_exhausted=True), progress=False)
    assert again.measured == 0 and len(visits) >= 1  # visited on request, and found used up again

def test_rounds_grow_every_task_in_one_run_and_the_stages_are_timed(tmp_path, monkeypatch):
    from cdmpp.collect import STAGES
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, matmul_module(), network=n, flops=65536.0)])
    summary = collect(tiny_cfg(tmp_path, rounds=(1, 3)), progress=False)
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
