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
    # a task the deployed network runs as a view is neither summed nor called unmeasured, and is named
    viewed = TuneResult(work, None, [*measured, TaskRow("reshape", 2, 0, float("nan"), float("nan"), view=True)])
    assert viewed.tuned_sum_s == failed.tuned_sum_s and viewed.unmeasured == []
    assert "run as views of their input (pure reshapes), not tuned and out of the sum: reshape" in format_tasks(viewed)
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
    monkeypatch.setattr(tune_module, "tune_kernels", interrupted)
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


LLAMA_PY = '''
import torch
from transformers import LlamaConfig, LlamaForCausalLM


class Decoder(torch.nn.Module):
    """A causal decoder of the LLaMA family (RMSNorm, SwiGLU, rotary embeddings, grouped
    attention), built from its transformers config with random weights: the logits."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        self.lm = LlamaForCausalLM(cfg).eval()

    def forward(self, ids):
        return self.lm(input_ids=ids, use_cache=False).logits


def build():
    torch.manual_seed(1)
    return Decoder(), (torch.randint(0, 256, (1, 16)),)
'''


def test_tune_builds_a_transformers_llama_decoder_that_matches_torch(tmp_path, capsys, monkeypatch):
    """A LLaMA-family decoder from ``transformers`` goes through ``cdmpp tune``: every task
    gets a first round within a budget of one trial per task, its causal-mask task (``bool``
    comparisons TVM 0.27 cannot compile as imported) builds, no weight is transposed per
    call, and the library gives torch's logits.  Then the compile's fallback: a task whose
    fastest record does not compile is built from its default schedule and named."""
    import torch
    import tvm
    from tvm import relax

    from cdmpp import dataset as ds
    from cdmpp.errors import InputError
    from cdmpp.estimate import relax_tasks
    from cdmpp.network_input import load_relax
    from cdmpp.tuning import tune as tune_module
    from cdmpp.tvm_compat import ArgInfo, JSONDatabase, Target, ms, structural_hash

    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    monkeypatch.setattr(ms_logger, "handlers", [h for h in ms_logger.handlers if h.get_name()])
    net = tmp_path / "llama.py"
    net.write_text(LLAMA_PY)
    work = tmp_path / "work"
    target = Target({"kind": "llvm", "num-cores": 2})
    relax_net = load_relax(f"{net}:build", target)
    tasks = relax_tasks(relax_net.mod, target)
    assert not any(t.name.startswith("transpose") for t in tasks)  # the weights' transposes run at load
    assert main(["tune", f"{net}:build", "--work-dir", str(work), "--trials", str(len(tasks)), "--trials-per-iter",
                 "8", "--cost-model", "xgb", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "compiled network" in out and "1 trials per task and round" in out
    rows = list(csv.DictReader(open(work / "tasks.csv", encoding="utf-8")))
    assert len(rows) == len(tasks) and all(int(r["trials"]) >= 1 for r in rows if r["view"] == "0")  # a first round
    assert all(int(r["trials"]) == 0 for r in rows if r["view"] == "1")  # a view is not tuned: the network runs no kernel
    mask = [r for r in rows if "less_equal" in r["task"]]
    assert mask and all(np.isfinite(float(r["best_s"])) for r in mask)
    model, (ids,) = _build(LLAMA_PY)
    weights = np.load(work / "weights.npz")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(work / "network.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(ids.numpy()), *[tvm.runtime.tensor(weights[k]) for k in weights.files])
    got = got[0] if not hasattr(got, "numpy") else got
    with torch.no_grad():
        np.testing.assert_allclose(got.numpy(), model(ids).numpy(), rtol=1e-4, atol=1e-4)

    # a task whose fastest record does not compile is built from its default schedule, its trials kept
    database = JSONDatabase(path_workload=str(work / ds.WORKLOAD_FILE), path_tuning_record=str(work / ds.RECORD_FILE))
    mask_task = next(t for t in tasks if "less_equal" in t.name)
    mask_hash = int(structural_hash(mask_task.mod))
    real_compile = ms.relax_integration.compile_relax

    def picky(db, *args, **kwargs):  # as TVM would fail on a record of the mask task that does not build
        if any(int(structural_hash(r.workload.mod)) == mask_hash for r in db.get_all_tuning_records()):
            raise RuntimeError("Check failed: (t.MatchesCode(DLDataTypeCode::kDLFloat)) is false:")
        return real_compile(db, *args, **kwargs)

    monkeypatch.setattr(ms.relax_integration, "compile_relax", picky)
    def signature(mod):  # the arguments' dtypes and shapes: the same for a task's scheduled and default programs
        return str([a.as_json() for a in ArgInfo.from_entry_func(mod)])

    monkeypatch.setattr(tune_module, "_fails_to_build",
                        lambda mod, target: "no" if signature(mod) == signature(mask_task.mod) else None)
    records = len(database.get_all_tuning_records())
    _, fallback = tune_module.build_network(database, relax_net.unfused, tasks, target, work)
    assert fallback == [mask_task.name] and len(database.get_all_tuning_records()) == records
    # a network that does not compile even so names the task that does not build, and keeps the work dir
    monkeypatch.setattr(ms.relax_integration, "compile_relax",
                        lambda *a, **k: (_ for _ in ()).throw(RuntimeError("CreateAdd")))
    with pytest.raises(InputError, match=rf"{mask_task.name} \(no\).*Every trial is kept in {work}"):
        tune_module.build_network(database, relax_net.unfused, tasks, target, work)


def _build(source: str):
    ns: dict = {}
    exec(source, ns)  # noqa: S102  the test's own network
    return ns["build"]()
