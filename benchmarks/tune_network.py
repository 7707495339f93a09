"""``cdmpp bench tune --whole-network``: a whole network tuned with each cost model, then timed end to end.

MetaSchedule's ``tune_relax`` tunes every task of a network (a zoo network or one outside
the zoo, :mod:`benchmarks.held_out`) with one global trial
budget (its gradient task scheduler divides it), once per cost model, on this CPU;
the network is then compiled with each tuning database and timed in the Relax VM.
The records are kept as one JSONDatabase per cost model and seed, like the per-task
runs of :mod:`benchmarks.tune`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks import render_table
from benchmarks.held_out import network_spec
from cdmpp import dataset as ds
from cdmpp.collect import QuietConfig, QuietGuard
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.estimate import relax_tasks
from cdmpp.network_input import relax_network
from cdmpp.records import read_workload_keys
from cdmpp.tvm_compat import (
    Target,
    load_tensor_intrinsics,
    ms,
    structural_hash,
)

from .truth_check import compile_time_and_profile
from .tune import (
    WEIGHTS_FILE,
    check_cost_models,
    record_checkpoint,
    run_dir,
    run_records,
    run_seed,
    run_trials,
    search_tools,
    start_run,
    trial_walls,
    tuned_run,
)


@dataclass
class NetworkTuneConfig:
    """What ``run_network_tuning`` tunes: a whole network with ``tune_relax``.

    Attributes:
        network: a zoo network name (``cdmpp.networks.network_names``) or one outside the zoo
            (:func:`benchmarks.held_out.held_out_networks`).
        trials: the global trial budget shared by all of the network's tasks (MetaSchedule's
            gradient task scheduler divides it).
        trials_per_iter: trials measured per search iteration of a task.
        cost_models: names from ``COST_MODELS``.
        checkpoint: the checkpoint of ``"cdmpp"`` (``None``: the shipped one).
        seed: seed of the search (the same for every cost model).
        repeat: end-to-end runs timed after tuning (the median is reported).
        profile_runs: inferences run after the timing with every Relax VM call timed
            (:func:`gap_breakdown`); 0: none.
    """

    network: str
    trials: int = 1000
    trials_per_iter: int = 16
    cost_models: tuple[str, ...] = ("xgb", "cdmpp")
    checkpoint: Path | None = None
    seed: int = 0
    repeat: int = 20
    profile_runs: int = 5

    def __post_init__(self):
        check_cost_models(self.cost_models)
        if self.trials < 1 or self.trials_per_iter < 1 or self.repeat < 1 or self.profile_runs < 0:
            raise InputError(f"trials, trials_per_iter and repeat must be >= 1, got {self.trials}, "
                             f"{self.trials_per_iter}, {self.repeat}; profile_runs must be >= 0, got {self.profile_runs}")


def network_curve(work_dir: Path, weights: dict[str, float], min_trials: int = 1) -> np.ndarray:
    """The tuned network's latency after each trial of a ``tune_relax`` work dir: float64 ``(T,)``
    seconds, ``sum(task weight * the task's best measured latency so far)`` over the tasks
    that have a successful trial by the end of the run (a task whose every trial failed,
    e.g. a gather whose random test indices fall outside its table, counts with weight 0);
    ``inf`` until each of those has one.

    Args:
        weights: task weight by the workload's structural hash (as the work dir's workload
            file writes it, a decimal string); workloads not in it count with weight 0.
        min_trials: only tasks with at least this many trials in the run count.  2 leaves
            out the tasks the search never explores (one trial: no design space, such as
            a weight transpose), whose single noisy timing can outweigh the tuned tasks.
    """
    wl_path = ds.resolve(Path(work_dir) / ds.WORKLOAD_FILE)
    if wl_path is None:
        return np.zeros(0, dtype=np.float64)
    hashes = read_workload_keys(wl_path)
    records = run_records(Path(work_dir))
    measured = {hashes[i] for i, secs in records if i < len(hashes) and secs}
    counts = Counter(hashes[i] for i, _ in records if i < len(hashes))
    best = {h: np.inf for h in weights if h in measured and counts[h] >= min_trials}
    out = []
    for index, secs in records:
        h = hashes[index] if index < len(hashes) else None
        if h in best and secs:
            best[h] = min(best[h], float(np.median(secs)))
        out.append(sum(weights[k] * v for k, v in best.items()) if best else np.inf)
    return np.asarray(out, dtype=np.float64)


PROFILE_FILE = "network_profile.json"
"""Where an end-to-end inference's time goes, per work dir (:func:`gap_breakdown`)."""


def gap_breakdown(work_dir: Path, tasks: list, profile: dict[str, float], e2e_s: float) -> dict:
    """Where the end-to-end time of a tuned network goes, against its tuned sum.

    Args:
        work_dir: the tuning run's JSONDatabase folder.
        tasks: the network's tasks (:class:`cdmpp.tasks.Task`: ``name``, ``weight``, ``mod``).
        profile: mean seconds per inference of each function the Relax VM called, by name
            (:func:`benchmarks.truth_check.compile_time_and_profile`).
        e2e_s: the network's median end-to-end seconds.

    Returns:
        ``e2e_s``; ``tuned_sum_s`` (task weight x the task's best measured latency, summed
        over the tasks with a successful trial); ``unmeasured_tasks`` (the others, by name);
        ``tasks_in_network_s`` (the tasks' kernels as the profile timed them inside the
        network); ``other_calls_s`` (every other call: kernels of no task, allocations,
        the VM's builtins); ``overhead_s`` (the rest: the VM's own work and the
        instrument's, less the run-to-run difference between the timed and the profiled
        runs); and ``per_task``, each task's ``name``, ``weight``, ``trials`` (measured in
        the run), ``best_s``, ``tuned_s`` (weight x best) and ``in_network_s``, largest
        ``in_network_s`` first.
    """

    wl_path = ds.resolve(Path(work_dir) / ds.WORKLOAD_FILE)
    hashes = read_workload_keys(wl_path) if wl_path is not None else []
    best: dict[str, float] = {}
    trials: dict[str, int] = {}
    for index, secs in run_records(Path(work_dir)):
        if index < len(hashes):
            trials[hashes[index]] = trials.get(hashes[index], 0) + 1
            if secs:
                best[hashes[index]] = min(best.get(hashes[index], np.inf), float(np.median(secs)))
    per_task = []
    for t in tasks:
        h = str(structural_hash(t.mod))
        b = best.get(h, float("nan"))
        per_task.append({"name": t.name, "weight": float(t.weight), "trials": trials.get(h, 0), "best_s": b,
                         "tuned_s": float(t.weight) * b, "in_network_s": profile.get(t.name, float("nan"))})
    per_task.sort(key=lambda r: -(r["in_network_s"] if np.isfinite(r["in_network_s"]) else -1.0))
    names = {t.name for t in tasks}
    in_network = float(sum(v for k, v in profile.items() if k in names))
    other = float(sum(v for k, v in profile.items() if k not in names))
    return {"e2e_s": e2e_s, "tuned_sum_s": float(sum(r["tuned_s"] for r in per_task if np.isfinite(r["tuned_s"]))),
            "unmeasured_tasks": [r["name"] for r in per_task if not np.isfinite(r["tuned_s"])],
            "tasks_in_network_s": in_network, "other_calls_s": other,
            "overhead_s": e2e_s - in_network - other if profile else float("nan"),
            "per_task": per_task, "other_calls": {k: v for k, v in profile.items() if k not in names}}


def run_network_tuning(out_dir: Path, cfg: NetworkTuneConfig, progress: bool = True) -> list[dict]:
    """Tune a whole network once per cost model with ``tune_relax`` on this CPU, then compile
    it with each tuning database and time it end to end in the Relax VM; resumable.

    The work dir of each cost model is ``out_dir/<network>/<cost model>/seed<seed>`` (a
    MetaSchedule JSONDatabase); a run with fewer than ``cfg.trials`` records starts again.
    Each run waits for a quiet machine first, every timing batch runs on a quiet machine
    (timed again when disturbed: ``retimed_batches``), and the run records the CPU other
    processes used over it (``other_cores``).

    Returns:
        One row per cost model: ``network``, ``cost_model``, ``seed``, ``tasks``,
        ``trials`` (measured), ``other_cores``, ``retimed_batches``, ``tuned_sum_s`` (sum of task weight x
        best measured latency), ``searched_sum_s`` (the same over the tasks with more than one
        trial, :func:`network_curve`), ``e2e_s`` (median end-to-end seconds in the Relax VM),
        ``tasks_in_network_s`` and ``other_calls_s`` (:func:`gap_breakdown`, also written
        to ``PROFILE_FILE`` in the work dir), ``compile_s`` and ``tune_s`` (wall seconds; for
        a run found finished, from its scheduler log, 0 without one).

    Raises:
        UnknownNetworkError: neither a zoo network nor one outside the zoo.
    """


    spec = network_spec(cfg.network)
    device = local_cpu()
    target = Target(device.target)
    guard = QuietGuard(QuietConfig())
    load_tensor_intrinsics()
    net = relax_network(cfg.network, spec.build(), spec.example_inputs(), target)
    mod, params, unfused = net.mod, net.params, net.unfused
    tasks = relax_tasks(mod, target)
    weights = {str(structural_hash(t.mod)): float(t.weight) for t in tasks}
    (Path(out_dir) / cfg.network).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / cfg.network / WEIGHTS_FILE).write_text(json.dumps(weights), encoding="utf-8")
    rows = []
    for model_name in cfg.cost_models:
        work_dir = run_dir(Path(out_dir) / cfg.network / model_name, cfg.seed, cfg.trials, cfg.trials_per_iter)
        walls = trial_walls(work_dir)  # a run found finished: its wall time from its scheduler log
        run = {"other_cores": float("nan"), "retimed_batches": 0, "tune_s": walls[-1][1] if walls else 0.0}
        if len(run_trials(work_dir)) < cfg.trials:
            start_run(work_dir, guard, progress, f"tuning {cfg.network} ({len(tasks)} tasks) with {model_name}, "
                                                  f"seed {cfg.seed} ({cfg.trials} trials)")
            record_checkpoint(work_dir, model_name, cfg.checkpoint)
            tools = search_tools(model_name, cfg.checkpoint, guard)
            run = tuned_run(guard, work_dir, partial(
                ms.relax_integration.tune_relax, mod, None, target, str(work_dir), max_trials_global=cfg.trials,
                num_trials_per_iter=cfg.trials_per_iter, seed=cfg.seed, **tools))
        for f in (ds.WORKLOAD_FILE, ds.RECORD_FILE):  # a run kept only gzipped (in git, say)
            ds.unpack(work_dir / f)
        database = ms.database.JSONDatabase(
            path_workload=str(work_dir / ds.WORKLOAD_FILE), path_tuning_record=str(work_dir / ds.RECORD_FILE)
        )
        e2e_s, compile_s, profile = compile_time_and_profile(database, unfused, params, spec.example_inputs(), target,
                                                             cfg.repeat, guard, cfg.profile_runs)
        curve = network_curve(work_dir, weights)
        searched = network_curve(work_dir, weights, min_trials=2)
        gap = gap_breakdown(work_dir, tasks, profile, e2e_s)
        (work_dir / PROFILE_FILE).write_text(json.dumps(gap, indent=1), encoding="utf-8")
        row = {"network": cfg.network, "cost_model": model_name, "seed": cfg.seed, "tasks": len(tasks),
               "trials": int(curve.size), "other_cores": run["other_cores"], "retimed_batches": run["retimed_batches"],
               "tuned_sum_s": float(curve[-1]) if curve.size else float("nan"),
               "searched_sum_s": float(searched[-1]) if searched.size else float("nan"), "e2e_s": e2e_s,
               "tasks_in_network_s": gap["tasks_in_network_s"], "other_calls_s": gap["other_calls_s"],
               "compile_s": compile_s, "tune_s": run["tune_s"]}
        if progress:
            print(format_network_tuning([row]), flush=True)
        rows.append(row)
    return rows


def network_curve_panels(out_dir: Path, network: str,
                         min_trials: int = 1) -> dict[str, dict[str, dict[int, np.ndarray]]]:
    """Whole-network curves of every run of ``network`` under ``out_dir`` for
    ``plot_tuning_curves``: ``{network: {cost model: {seed: (T,) curve}}}``, each
    :func:`network_curve` (with ``min_trials``) with NaN (not drawn) until every task has
    a measured trial.

    The task weights come from ``out_dir/<network>/task_weights.json`` (written by
    :func:`run_network_tuning`), else from extracting the network's tasks again.
    """
    weights_file = Path(out_dir) / network / WEIGHTS_FILE
    if weights_file.exists():
        weights = json.loads(weights_file.read_text(encoding="utf-8"))
    else:
        from benchmarks.held_out import network_tasks  # noqa: PLC0415  (only on the branch that needs it)

        weights = {str(structural_hash(mod)): weight
                   for _, weight, mod, _ in network_tasks(network, Target(local_cpu().target))}
    panel: dict[str, dict[int, np.ndarray]] = {}
    for model_dir in sorted(p for p in (Path(out_dir) / network).iterdir() if p.is_dir()):
        for run in sorted(model_dir.glob("seed*"), key=run_seed):
            curve = network_curve(run, weights, min_trials)
            if np.isfinite(curve).any():
                panel.setdefault(model_dir.name, {})[run_seed(run)] = np.where(np.isfinite(curve), curve, np.nan)
    return {network: panel} if panel else {}


def format_network_tuning(rows: list[dict], markdown: bool = False) -> str:
    """The rows of :func:`run_network_tuning` as a table (milliseconds, minutes)."""

    head = ["network", "cost model", "seed", "tasks", "trials", "tuned sum ms", "searched sum ms", "end to end ms",
            "tasks in network ms", "other calls ms", "tuning min"]
    body = [
        [r["network"], r["cost_model"], str(r["seed"]), str(r["tasks"]), str(r["trials"]),
         f"{1e3 * r['tuned_sum_s']:.2f}", f"{1e3 * r.get('searched_sum_s', float('nan')):.2f}", f"{1e3 * r['e2e_s']:.2f}",
         f"{1e3 * r.get('tasks_in_network_s', float('nan')):.2f}", f"{1e3 * r.get('other_calls_s', float('nan')):.2f}",
         f"{r['tune_s'] / 60:.1f}"]
        for r in rows
    ]
    return render_table(head, body, markdown)
