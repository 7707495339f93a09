"""How a collection times programs: the quiet-machine guard, build workers paused during timings, two tasks in flight, adaptive repeats, and the collection-rate benchmark."""

import pytest
from support import matmul_module, tiny_cfg

from cdmpp import dataset as ds
from cdmpp.card import card
from cdmpp.collect import collect
from cdmpp.errors import InputError


def test_the_quiet_machine_guard_waits_for_a_busy_process_to_end(tmp_path, monkeypatch):
    """A busy loop outside the collector's process tree holds every timing until it ends."""
    import subprocess
    import sys
    import time

    from cdmpp.collect import QuietConfig
    from cdmpp.collect import loop as loop_mod
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, matmul_module(), network=n, flops=65536.0)])
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
    summary = collect(tiny_cfg(tmp_path, quiet=QuietConfig(settle_s=0.5, max_wait_s=120)), progress=False)
    start = started[0]
    ended = start + busy_s
    assert summary.measured == 2
    q = ds.read_manifest(summary.device_dir)["collections"][-1]["quiet_machine"]
    kept = [t for t, _, k in q["timings"] if k]
    assert kept and min(kept) >= ended - 1.0  # every kept timing started after the loop ended
    # it waited, or timed a disturbed batch again (the loop may have started after a quiet check)
    assert summary.stage_seconds["quiet-machine wait"] > 1.0 or q["retimed_batches"] >= 1

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
    mod = matmul_module()
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
    mod = matmul_module()
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
    summary = collect(tiny_cfg(tmp_path, max_tasks_per_network=2), progress=False)
    assert summary.measured == 4 and summary.failed == 0
    assert [e for e, _ in events] == ["submit", "submit", "time", "time"]
    records = ds.load_device_dir(summary.device_dir).programs
    assert len(records) == 4 and len({p.workload_index for p in records}) == 2

def test_adaptive_repeats_stop_early_only_when_the_first_repeats_agree(tmp_path, monkeypatch):
    from cdmpp.collect import MeasureConfig
    from cdmpp.collect import sampling as sampling_mod
    from cdmpp.tasks import Task

    monkeypatch.setattr(sampling_mod, "extract_network_tasks", lambda n, _t: [Task("mm", 1, matmul_module(), network=n, flops=65536.0)])
    # any spread is small enough and any program slow enough: every program stops after 2 repeats
    early = MeasureConfig(repeat=6, adaptive_repeats=2, adaptive_min_s=0.0, adaptive_max_spread=10.0)
    s = collect(tiny_cfg(tmp_path / "early", programs_per_task=3, measure=early), progress=False)
    db = ds.load_device_dir(s.device_dir)
    assert s.measured == 3 and [len(p.run_secs) for p in db.programs] == [2, 2, 2]
    assert db.manifest["collections"][-1]["measurement"]["adaptive_repeats"] == 2
    # no program is slow enough (1000 s): every program gets every repeat
    never = MeasureConfig(repeat=6, adaptive_repeats=2, adaptive_min_s=1e3, adaptive_max_spread=10.0)
    s = collect(tiny_cfg(tmp_path / "never", programs_per_task=3, measure=never), progress=False)
    assert [len(p.run_secs) for p in ds.load_device_dir(s.device_dir).programs] == [6, 6, 6]
    assert "- Programs by repeats kept: 6 repeats: 3" in card(s.device_dir)

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
