"""``cdmpp tune``: a small network tuned with the plugin, built, run, resumed and interrupted."""

import csv
import logging

import numpy as np
import pytest

from cdmpp.cli import main

NET_PY = '''
import torch


class Tiny(torch.nn.Module):
    """Not a zoo network: a dense layer and a ReLU."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dense = torch.nn.Linear(32, 16)

    def forward(self, x):
        return torch.relu(self.dense(x))


def build():
    torch.manual_seed(1)
    return Tiny(), (torch.randn(4, 32),)
'''


def test_tune_config_refuses_a_bad_budget_and_an_unknown_cost_model():
    from cdmpp.errors import InputError
    from cdmpp.tuning.tune import TuneConfig

    with pytest.raises(InputError, match="trials"):
        TuneConfig(trials=0)
    with pytest.raises(InputError, match="cost model"):
        TuneConfig(cost_model="random")


def test_tune_builds_a_network_that_runs_and_resumes_its_work_dir(tmp_path, capsys, monkeypatch):
    import torch
    import tvm
    from tvm import relax

    from cdmpp.tuning import tune as tune_module
    from cdmpp.tuning.tune import count_trials

    # MetaSchedule's logging config names every handler of its logger; the unnamed capture handlers that
    # pytest leaves there after earlier tuning tests break it (a user's process has none)
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    monkeypatch.setattr(ms_logger, "handlers", [h for h in ms_logger.handlers if h.get_name()])
    net = tmp_path / "net.py"
    net.write_text(NET_PY)
    work = tmp_path / "work"
    argv = ["tune", f"{net}:build", "--work-dir", str(work), "--trials", "4", "--trials-per-iter", "2",
            "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "0 trials kept" in out and "compiled network" in out
    assert "nan" not in out.split("tuned sum")[1].split("\n")[0]  # the tasks without a trial are left out of it
    trials = count_trials(work)
    assert 1 <= trials <= 4 + 2  # the task scheduler may finish a task's last batch past the budget
    rows = list(csv.DictReader(open(work / "tasks.csv", encoding="utf-8")))
    assert rows and sum(int(r["trials"]) for r in rows) == trials
    tuned = [r for r in rows if int(r["trials"])]
    assert tuned and all(float(r["best_s"]) > 0 and float(r["predicted_s"]) > 0 for r in tuned)
    # a task whose every trial failed (a gather with random indices, say) is named, not summed as NaN
    from cdmpp.tuning.tune import TaskRow, TuneResult, format_tasks

    measured = [TaskRow(r["task"], int(r["weight"]), int(r["trials"]), float(r["best_s"]), float(r["predicted_s"]))
                for r in rows]
    failed = TuneResult(work, None, [*measured, TaskRow("take", 1, 16, float("nan"), float("nan")),
                                     TaskRow("reshape", 2, 0, float("nan"), float("nan"))])
    table = format_tasks(failed)
    assert failed.tuned_sum_s == pytest.approx(sum(t.weight * t.best_s for t in measured))
    assert [t.task for t in failed.unmeasured] == ["take", "reshape"]
    assert (f"2 of {len(rows) + 2} tasks have no successful trial and are left out of the sum (the network runs "
            f"them unscheduled): take (16 trials, none succeeded), reshape (not tuned)") in table
    # the library is deployable: it loads and computes what the torch model computes
    ns: dict = {}
    exec(NET_PY, ns)  # noqa: S102  the test's own network
    model, (x,) = ns["build"]()
    weights = np.load(work / "weights.npz")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(work / "network.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy()), *[tvm.runtime.tensor(weights[k]) for k in weights.files])
    got = got[0] if not hasattr(got, "numpy") else got  # torch's import returns a tuple of outputs
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(x).numpy(), rtol=1e-4, atol=1e-5)
    # the same command resumes: every trial is kept and none is tuned again
    assert main(argv) == 0
    assert f"{trials} trials kept" in capsys.readouterr().out and count_trials(work) == trials

    # Ctrl-C during a longer run keeps every finished trial and writes the table
    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tune_module, "_search_tools", lambda cfg, device: {})
    from cdmpp.tvm_compat import ms

    monkeypatch.setattr(ms.relax_integration, "tune_relax", interrupted)
    assert main(argv[:5] + ["8"] + argv[6:]) == 130
    assert "interrupted" in capsys.readouterr().out and count_trials(work) == trials
    assert (work / "tasks.csv").exists()


GATHER_PY = '''
import torch


class Lookup(torch.nn.Module):
    """An embedding lookup (a gather, ``take``) and a dense layer."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(100, 32)
        self.dense = torch.nn.Linear(32, 16)

    def forward(self, ids):
        return self.dense(self.emb(ids))


def build():
    return Lookup(), (torch.zeros(1, 8, dtype=torch.int64),)
'''


def test_tune_measures_a_gather_with_in_range_indices_and_the_truth_check_reads_its_work_dir(tmp_path, capsys,
                                                                                             monkeypatch):
    """``cdmpp tune`` times the embedding's gather with indices inside its table (TVM's
    random fill would point outside it and every trial would fail), so every task has a
    measured record and ``cdmpp bench truth-check --work-dirs`` compiles and times the network."""
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    monkeypatch.setattr(ms_logger, "handlers", [h for h in ms_logger.handlers if h.get_name()])
    net = tmp_path / "gather.py"
    net.write_text(GATHER_PY)
    work = tmp_path / "work"
    assert main(["tune", f"{net}:build", "--work-dir", str(work), "--trials", "16", "--trials-per-iter", "2",
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(open(work / "tasks.csv", encoding="utf-8")))
    take = [r for r in rows if "take" in r["task"]]
    assert take and all(int(r["trials"]) > 0 and float(r["best_s"]) > 0 for r in take)
    assert all(float(r["best_s"]) > 0 for r in rows if int(r["trials"]))
    capsys.readouterr()
    out = tmp_path / "truth.json"
    assert main(["bench", "truth-check", "--work-dirs", str(work), "-n", f"{net}:build", "--repeat", "3",
                 "--output", str(out)]) == 0
    import json

    row = json.loads(out.read_text())[0]
    assert row["measured_e2e_s"] > 0 and row["measured_sum_s"] > 0 and row["estimate_s"] > 0


def test_the_tune_benchmark_measures_a_gather_with_in_range_indices(tmp_path):
    """``cdmpp bench tune``'s builder and runner time an embedding's gather with indices
    inside its table, as ``cdmpp tune``'s do; MetaSchedule's own ``LocalRunner`` fills the
    index with random values and the run fails, so a whole network tuned with it keeps no
    successful trial of the gather and the truth check refuses its work dir."""
    from benchmarks.tune import search_tools
    from cdmpp.collect import MeasureConfig, QuietConfig, QuietGuard
    from cdmpp.device import local_cpu
    from cdmpp.estimate import relax_tasks
    from cdmpp.network_input import load_relax
    from cdmpp.tvm_compat import (
        ArgInfo,
        BuilderInput,
        LocalBuilder,
        LocalRunner,
        RunnerInput,
        Target,
        build_for_measurement,
    )

    net = tmp_path / "gather.py"
    net.write_text(GATHER_PY)
    target = Target(local_cpu().target)
    take = [t.mod for t in relax_tasks(load_relax(f"{net}:build", target).mod, target) if "take" in t.name]
    assert len(take) == 1

    def run(builder, runner):
        built = builder.build([BuilderInput(take[0], target)])[0]
        assert built.error_msg is None
        return runner.run([RunnerInput(built.artifact_path, "cpu", ArgInfo.from_entry_func(take[0]))])[0].result()

    m = MeasureConfig()
    plain = run(LocalBuilder(timeout_sec=m.build_timeout_s, f_build=build_for_measurement),
                LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=m.evaluator_config()))
    assert plain.error_msg and "Unknown device" not in plain.error_msg  # the random index points outside the table
    tools = search_tools("xgb", None, QuietGuard(QuietConfig()))
    safe = run(tools["builder"], tools["runner"])
    assert safe.error_msg is None and len(safe.run_secs) > 0 and all(float(s) > 0 for s in safe.run_secs)
