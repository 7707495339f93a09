"""``cdmpp bench deployed-import``: a network imported with its weights as per-call inputs
against the same network imported as it is deployed, on this CPU.

With the weights as inputs of ``main`` (``from_exported_program(keep_params_as_input=True)``
then ``detach_params``, the import cdmpp used before), every computation on the weights
alone (each ``nn.Linear`` weight's transpose, a bias reshape, a folded batch norm) runs
at every call.  cdmpp's import (:func:`cdmpp.relax_import.import_torch`) lifts them into a
function run once at load.  For one network this bench

1. lists both imports' tasks, and the tasks the deployed import no longer runs per call;
2. tunes the per-call import's tasks once (``tune_relax``, TVM's ``XGBModel``, gathers
   measured with in-range indices, every task a first round): a superset of the deployed
   import's tasks, so one database serves both;
3. compiles both with that database and times each end to end in the Relax VM, one
   right after the other (waiting for a quiet machine);
4. profiles one inference of each: the share of per-call time spent in the kernels that
   compute on the weights alone.

The tuning work dir is resumed when it already holds the budget.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks import render_table
from benchmarks.truth_check import compile_time_and_profile, load_network
from cdmpp import dataset as ds
from cdmpp.collect import QuietConfig, QuietGuard
from cdmpp.device import local_cpu
from cdmpp.estimate import relax_tasks
from cdmpp.relax_import import fuse_relax
from cdmpp.tuning.config import SearchConfig
from cdmpp.tuning.tune import count_trials, first_round_trials, gather_safe_measurers
from cdmpp.tvm_compat import Target, load_tensor_intrinsics, ms, relax, structural_hash, tvm


def weights_as_inputs_import(model, example_inputs: tuple):
    """The import with the weights as per-call inputs: ``(unfused per-call module,
    weights)``.  What cdmpp's import was before it lifted the weight-only computations
    (``torch.export`` -> ``from_exported_program(keep_params_as_input=True)`` ->
    ``detach_params`` -> inference decomposition), with the same ``bool`` repairs, so
    that both imports compile."""
    import torch  # noqa: PLC0415  (keeps torch off this module's import)
    from tvm.relax.frontend.torch import from_exported_program  # noqa: PLC0415  (torch)

    from cdmpp.relax_import import repair_bool_ops  # noqa: PLC0415  (tvm)

    with torch.no_grad():
        exported = torch.export.export(model.eval(), example_inputs)
    mod, params = relax.frontend.detach_params(from_exported_program(exported, keep_params_as_input=True))
    mod = tvm.ir.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                       relax.transform.CanonicalizeBindings()])(repair_bool_ops(mod))
    return mod, list(params["main"])


def run_deployed_import(network: str, work_dir: Path, trials: int, trials_per_iter: int, repeat: int,
                        profile_runs: int = 5, seed: int = 0) -> dict:
    """Tune, compile and time both imports of ``network`` on this CPU (module docstring).

    Returns:
        ``{"network", "device", "trials", "tasks_per_call", "tasks_deployed", "lifted_tasks",
        "per_call_e2e_s", "deployed_e2e_s", "per_call_lifted_s", "per_call_profiled_s",
        "deployed_profiled_s", "compile_s"}``; seconds; ``lifted_tasks`` the per-call
        import's tasks (name, weight) whose workload the deployed import does not run per
        call, ``per_call_lifted_s`` their profiled time in one inference.
    """
    here = local_cpu()
    target = Target(here.target)
    net = load_network(network, target)
    inputs = net.example_inputs
    old_unfused, old_params = weights_as_inputs_import(_torch_model(network), inputs)
    old_tasks = relax_tasks(fuse_relax(old_unfused, target), target)
    new_tasks = relax_tasks(net.mod, target)
    new_keys = {int(structural_hash(t.mod)) for t in new_tasks}
    lifted = [t for t in old_tasks if int(structural_hash(t.mod)) not in new_keys]
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    todo = trials - count_trials(work_dir)
    if todo > 0:
        load_tensor_intrinsics(target)
        builder, runner = gather_safe_measurers()
        ms.relax_integration.tune_relax(
            fuse_relax(old_unfused, target), None, target, str(work_dir), max_trials_global=todo,
            num_trials_per_iter=first_round_trials(trials, trials_per_iter, len(old_tasks)), seed=seed,
            cost_model="xgb", strategy=SearchConfig().strategy(), builder=builder, runner=runner)
    database = ms.database.JSONDatabase(path_workload=str(work_dir / ds.WORKLOAD_FILE),
                                        path_tuning_record=str(work_dir / ds.RECORD_FILE))
    guard = QuietGuard(QuietConfig())
    old_e2e, old_compile, old_profile = compile_time_and_profile(database, old_unfused, old_params, inputs, target,
                                                                 repeat, guard, profile_runs)
    new_e2e, new_compile, new_profile = compile_time_and_profile(database, net.unfused, net.params, inputs, target,
                                                                 repeat, guard, profile_runs)
    lifted_names = {t.name for t in lifted}
    return {
        "network": network, "device": here.device_id, "trials": count_trials(work_dir),
        "tasks_per_call": [[t.name, t.weight] for t in old_tasks],
        "tasks_deployed": [[t.name, t.weight] for t in new_tasks],
        "lifted_tasks": [[t.name, t.weight] for t in lifted],
        "per_call_e2e_s": old_e2e, "deployed_e2e_s": new_e2e,
        "per_call_lifted_s": float(sum(v for k, v in old_profile.items() if k in lifted_names)),
        "per_call_profiled_s": float(sum(old_profile.values())),
        "deployed_profiled_s": float(sum(new_profile.values())),
        "compile_s": [old_compile, new_compile],
    }


def _torch_model(network: str):
    """A fresh ``torch.nn.Module`` of ``network`` (as :func:`benchmarks.truth_check.load_network` names it)."""
    from benchmarks.held_out import held_out_network, held_out_networks  # noqa: PLC0415  (torch)
    from cdmpp import networks as zoo  # noqa: PLC0415  (torch)
    from cdmpp.network_input import user_model  # noqa: PLC0415  (torch)

    if network in held_out_networks():
        return held_out_network(network).build()
    if ".py:" in network:
        return user_model(network)[0]
    return zoo.get_network(network).build()


def format_rows(row: dict, markdown: bool = False) -> str:
    """The comparison as a table (milliseconds)."""
    head = ["import", "tasks", "calls", "end to end ms", "weight-only kernels ms (profiled)", "share of profiled"]
    pc, dep = row["tasks_per_call"], row["tasks_deployed"]
    body = [
        ["weights as per-call inputs", str(len(pc)), str(sum(w for _, w in pc)), f"{1e3 * row['per_call_e2e_s']:.2f}",
         f"{1e3 * row['per_call_lifted_s']:.2f}", f"{row['per_call_lifted_s'] / row['per_call_profiled_s']:.0%}"],
        ["deployed (lifted to load time)", str(len(dep)), str(sum(w for _, w in dep)),
         f"{1e3 * row['deployed_e2e_s']:.2f}", "0.00", "0%"],
    ]
    return render_table(head, body, markdown)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench deployed-import``'s arguments."""
    parser.add_argument("-n", "--network", required=True,
                        help="a zoo name, a held-out test network by name (llama_1024-b1s128, ...) or module.py:function")
    parser.add_argument("--work-dir", required=True, help="the tuning JSONDatabase folder (resumed)")
    parser.add_argument("--trials", type=int, default=400, help="global trial budget of the per-call import's tasks")
    parser.add_argument("--trials-per-iter", type=int, default=16, help="trials per search iteration of a task")
    parser.add_argument("--repeat", type=int, default=20, help="end-to-end runs timed (median)")
    parser.add_argument("--output", default=None, help="also write the row (with both task lists) as JSON here")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench deployed-import``."""
    row = run_deployed_import(args.network, Path(args.work_dir), args.trials, args.trials_per_iter, args.repeat)
    table = format_rows(row, markdown=True)
    print(table)
    print(f"per-call tasks no longer run per call: "
          f"{', '.join(f'{n} (x{w})' for n, w in row['lifted_tasks']) or 'none'}")
    if args.output:
        Path(args.output).write_text(json.dumps(row, indent=1) + "\n", encoding="utf-8")
        Path(args.output).with_suffix(".md").write_text(f"{row['device']}, {row['trials']} trials (XGBModel)\n\n"
                                                         f"{table}\n", encoding="utf-8")
    return 0 if np.isfinite(row["deployed_e2e_s"]) else 1
