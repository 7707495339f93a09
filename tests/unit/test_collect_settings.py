"""The collector's settings, rules and helpers that build and time nothing: configs, the adaptive-repeat rule, the quiet guard's retiming, stage clocks, sampling threads, gather index bounds."""

import json

import pytest
from support import gather_module

from cdmpp import dataset as ds
from cdmpp.collect import collect
from cdmpp.errors import InputError


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

    assert index_bounds(gather_module(4096)) == ((1, 4096),)
    assert index_bounds(class_token) == ((1, 197),)  # the middle axis, not the batch of 4
    assert index_bounds(vector_add) == ()  # no integer argument: TVM's own fill

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

def test_sampling_threads_share_the_cores_with_the_builds():
    from cdmpp.collect import sampling_threads

    assert sampling_threads(2, 1) == 2 and sampling_threads(2, 2) == 1
    assert sampling_threads(16, 2) == 8 and sampling_threads(1, 2) == 1

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


def test_collect_flags_reach_their_config_fields_and_the_rest_keep_the_defaults():
    """``cdmpp collect``'s options come from one table (``COLLECT_FLAGS``): each sets one
    field of ``CollectConfig``, ``MeasureConfig`` or ``QuietConfig``; an option left out keeps
    the dataclass default."""
    from cdmpp.cli import build_parser
    from cdmpp.collect import CollectConfig, MeasureConfig, QuietConfig
    from cdmpp.data_cli import collect_configs

    def parsed(*extra):
        return collect_configs(build_parser().parse_args(["collect", "-o", "out", "-n", "dcgan-b1", *extra]))

    fields, measure, quiet = parsed()
    assert fields == {} and measure == MeasureConfig() and quiet == QuietConfig()
    fields, measure, quiet = parsed("--programs-per-task", "8", "--no-warm", "--adaptive-repeats", "0",
                                    "--warm-min-repeat-ms", "1", "--allow-busy", "--tuned-skip-network", "a", "b",
                                    "--tasks-in-flight", "1", "--gpu")
    assert fields == {"programs_per_task": 8, "tuned_skip_networks": ("a", "b"), "tasks_in_flight": 1, "gpu": True}
    assert (measure.warm, measure.adaptive_repeats, measure.warm_min_repeat_ms) == (False, None, 1)
    assert quiet.enabled is False
    assert CollectConfig(networks=["dcgan-b1"], out_dir="out", **fields).programs_per_task == 8
