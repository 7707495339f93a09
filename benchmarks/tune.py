"""``cdmpp bench tune``: does the cost-model plugin find faster schedules in fewer trials?

For each chosen task, MetaSchedule's own tuner (``tune_tir``: evolutionary search,
builds on all cores, timings one at a time on this CPU) runs once per cost model
with the same seed and trial budget: TVM's ``XGBModel`` (trained online on the
task's measurements, TVM's default), :class:`~cdmpp.tuning.cost_model.CdmppCostModel`
(a trained checkpoint that also learns from the task's trials), and optionally ``random`` scores.  The
measured trials are kept as MetaSchedule tuning records in one work dir per run, so
a stopped benchmark resumes where it stopped and every trial is a real measurement.
The figure of merit is the best measured latency after ``k`` trials (TenSet,
NeurIPS 2021, section 6, uses the same search-curve comparison).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks import render_table, tmpdir_env, write_csv_and_markdown
from benchmarks.held_out import held_out_networks, held_out_tasks_of
from cdmpp import dataset as ds
from cdmpp.collect import MeasureConfig, QuietConfig, QuietGuard, quiet_runner
from cdmpp.device import local_cpu, record_device
from cdmpp.errors import InputError, UnknownNetworkError
from cdmpp.records import read_records
from cdmpp.tasks import Task
from cdmpp.train.report import checkpoint_line
from cdmpp.tuning.config import OnlineConfig, SearchConfig
from cdmpp.tuning.cost_model import CdmppCostModel
from cdmpp.tuning.tune import gather_safe_measurers
from cdmpp.tvm_compat import Target, load_tensor_intrinsics, ms

COST_MODELS = ("xgb", "cdmpp", "random", "cdmpp-static", "cdmpp-level", "cdmpp-leaves", "cdmpp-pairwise",
               "cdmpp-wide", "cdmpp-explore")
"""Cost models a run can use: TVM's XGBModel, the plugin, random scores, and the plugin's
variants: the online-update ablation, ``cdmpp-static`` (no update), ``cdmpp-level`` (the
level shift only, no residual trees) and ``cdmpp-leaves`` (residual trees on the summed
leaves alone, without the schedule trace); ``cdmpp-pairwise`` (residual trees with a
within-task ranking objective); and two search settings, ``cdmpp-wide`` (a population
of 2,048 evolved for 8 generations: more candidates ranked by the model) and
``cdmpp-explore`` (a quarter of each round's trials picked at random)."""
ONLINE_ABLATION = {"cdmpp": {}, "cdmpp-static": {"enabled": False}, "cdmpp-level": {"min_trials": 1 << 30},
                   "cdmpp-leaves": {"trace_inputs": False}, "cdmpp-pairwise": {"objective": "pairwise"},
                   "cdmpp-wide": {}, "cdmpp-explore": {}}
"""``OnlineConfig`` fields of each plugin variant."""
SEARCH_VARIANTS = {"cdmpp-wide": {"population_size": 2048, "genetic_num_iters": 8},
                   "cdmpp-explore": {"eps_greedy": 0.25}}
"""``SearchConfig`` fields of the plugin variants that change the search (the others: TVM's defaults)."""
WEIGHTS_FILE = "task_weights.json"
"""Task weight by workload structural hash, beside a whole-network run's work dirs."""
CHECKPOINT_FILE = "checkpoint.md"
"""Per plugin work dir: the :func:`~cdmpp.train.report.checkpoint_line` of the checkpoint
that tuned the run, written when the run starts, so that a summary made later with
another checkpoint still names the run's own."""


def check_cost_models(names) -> None:
    bad = [m for m in names if m not in COST_MODELS]
    if bad:
        raise InputError(f"unknown cost models {bad}; choose from {COST_MODELS}")


def run_dir(model_dir: Path, seed: int | None, trials: int, overshoot: int = 0) -> Path:
    """The work dir of one run of ``trials`` trials: ``model_dir`` (a task's folder of one
    cost model), or its ``seed<seed>`` sub-folder.

    A finished run is kept gzipped (and may be tracked in git); a run with another budget
    never replaces it: it goes to ``<model_dir>-<trials>trials`` instead, which reads back
    as a cost model of its own.  A run of ``trials`` to ``trials + overshoot - 1`` trials
    is the same budget (a whole network's global budget ends with the round that reaches
    it: pass the trials per round)."""
    def at(folder: Path) -> Path:
        return folder if seed is None else folder / f"seed{seed}"

    base = at(model_dir)
    kept = any((base / f"{f}.gz").exists() for f in (ds.RECORD_FILE, ds.WORKLOAD_FILE))
    if kept and not trials <= len(run_trials(base)) < trials + max(overshoot, 1):
        return at(model_dir.with_name(f"{model_dir.name}-{trials}trials"))
    return base


def start_run(work_dir: Path, guard, progress: bool, message: str) -> None:
    """Clear an unfinished run's plain record files (a finished run's gzipped records are
    never deleted: :func:`run_dir`), wait for a quiet machine, say what is tuned."""
    for f in (ds.RECORD_FILE, ds.WORKLOAD_FILE):
        if (work_dir / f"{f}.gz").exists():
            raise InputError(f"{work_dir} holds a finished run's records ({f}.gz); they are not overwritten")
        (work_dir / f).unlink(missing_ok=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    guard.wait_quiet(lambda msg: print(msg, flush=True) if progress else None)
    if progress:
        print(message, flush=True)


def record_checkpoint(work_dir: Path, model_name: str, checkpoint: Path | None) -> None:
    """Write the :data:`CHECKPOINT_FILE` of a plugin run (``model_name`` in
    ``ONLINE_ABLATION``); nothing for XGBoost or random scores."""
    if model_name in ONLINE_ABLATION:
        (Path(work_dir) / CHECKPOINT_FILE).write_text(checkpoint_line(checkpoint) + "\n", encoding="utf-8")


WALL_FILE = "tuning_wall.json"
"""Per work dir: ``[[trials, seconds since the run began], ...]`` from MetaSchedule's
task-scheduler log, kept beside the records (the logs themselves are not)."""
_SCHEDULER_LOG = "logs/tvm.s_tir.meta_schedule.logging.task_scheduler.log"


def trial_walls(work_dir: Path) -> list[tuple[int, float]]:
    """Wall seconds from the start of a tuning run to each round's ``Total trials: N``
    line of its task-scheduler log (second resolution, as MetaSchedule logs), as
    ``[(N, seconds), ...]``; read from :data:`WALL_FILE` when the logs are gone.
    Empty when neither exists."""
    work_dir = Path(work_dir)
    saved = work_dir / WALL_FILE
    if saved.exists():
        return [(int(n), float(t)) for n, t in json.loads(saved.read_text(encoding="utf-8"))]
    log = work_dir / _SCHEDULER_LOG
    if not log.exists():
        return []
    out, start, last = [], None, None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) ", line)
        if stamp:
            last = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")
            start = start or last
        total = re.match(r"Total trials: (\d+)", line)
        if total and last is not None:
            out.append((int(total.group(1)), (last - start).total_seconds()))
    return out


def save_trial_walls(work_dir: Path) -> Path | None:
    """Write :func:`trial_walls` of a work dir into its :data:`WALL_FILE`; ``None`` without a log."""
    walls = trial_walls(work_dir)
    if not walls:
        return None
    path = Path(work_dir) / WALL_FILE
    path.write_text(json.dumps(walls), encoding="utf-8")
    return path


def seconds_to_trials(work_dir: Path, trials: int) -> float | None:
    """Wall seconds of a tuning run until it had measured at least ``trials`` trials
    (:func:`trial_walls`); ``None`` if it never did or nothing is logged."""
    return next((t for n, t in trial_walls(work_dir) if n >= trials), None)


def tuned_run(guard, work_dir: Path, tune) -> dict:
    """Run ``tune()`` (one MetaSchedule tuning call), its builders' temporary files under
    ``work_dir/tmp`` (removed after).

    Returns:
        ``tune_s`` (wall seconds), ``other_cores`` (the CPU other processes used over the
        whole run, in cores, building and search included) and ``retimed_batches``
        (timing batches the guard timed again because another process was busy).
    """

    retimed, t0, start = guard.retimed, time.perf_counter(), guard.snapshot()
    with tmpdir_env(work_dir / "tmp"):
        tune()
    ds.pack(work_dir)  # gzipped copies of the finished run's records, small enough to keep in git
    save_trial_walls(work_dir)
    return {"tune_s": round(time.perf_counter() - t0, 1), "other_cores": round(guard.other_cores(start), 3),
            "retimed_batches": guard.retimed - retimed}


def search_tools(model_name: str, checkpoint: Path | None, guard) -> dict:
    """``cost_model``, ``builder`` and ``runner`` arguments of MetaSchedule's tuning entry
    points: the collector's measurement protocol, gathers measured with in-range indices
    as ``cdmpp tune`` measures them (:func:`cdmpp.tuning.tune.gather_safe_measurers`), every
    batch timed on a quiet machine (``guard``, a ``QuietGuard``), and the plugin for
    ``"cdmpp"``."""

    builder, runner = gather_safe_measurers(MeasureConfig())
    tools = {
        "cost_model": (CdmppCostModel(str(checkpoint) if checkpoint else None,
                                      online=OnlineConfig(**ONLINE_ABLATION[model_name]))
                       if model_name in ONLINE_ABLATION else model_name),
        "builder": builder,
        "runner": quiet_runner(runner, guard, lambda msg: print(msg, flush=True)),
    }
    if model_name in SEARCH_VARIANTS:
        tools["strategy"] = SearchConfig(**SEARCH_VARIANTS[model_name]).strategy()
    return tools


@dataclass
class TuneBenchmarkConfig:
    """What ``run_tune_benchmark`` tunes and how.

    Attributes:
        network: the network whose tasks are tuned (a network of the dataset's manifest),
            or several, separated by commas.
        tasks: how many tasks of each network, the largest by task weight x FLOPs first.
        trials: measured trials per task and cost model.
        trials_per_iter: trials measured per search iteration.
        cost_models: names from ``COST_MODELS``.
        checkpoint: the checkpoint of ``"cdmpp"`` (``None``: the shipped one).
        seed: seed of the search (the same for every cost model).
        seeds: several seeds, each a run of its own (default: ``(seed,)``).
        checkpoints_at: trial counts at which the best latency is reported.
        task_names: ``"<network>:<task name or prefix>"`` entries, tuned besides each
            network's ``tasks`` largest (a network named only here contributes just these).
        model_trials: ``"<cost model>=<trials>"`` entries overriding ``trials`` for that
            cost model (``"xgb=512"``: XGBoost's longer run is the reference to reach).
    """

    network: str
    tasks: int = 3
    trials: int = 64
    trials_per_iter: int = 16
    cost_models: tuple[str, ...] = ("xgb", "cdmpp")
    checkpoint: Path | None = None
    seed: int = 0
    checkpoints_at: tuple[int, ...] = (16, 32, 64)
    seeds: tuple[int, ...] = ()
    task_names: tuple[str, ...] = ()
    model_trials: tuple[str, ...] = ()

    def trials_for(self, cost_model: str) -> int:
        """The trial budget of ``cost_model``'s runs."""
        for e in self.model_trials:
            name, _, n = e.partition("=")
            if name == cost_model:
                return int(n)
        return self.trials

    def names_for(self, network: str) -> tuple[str, ...]:
        """The task names picked for ``network`` besides its largest ``tasks``."""
        return tuple(e.split(":", 1)[1] for e in self.task_names if e.split(":", 1)[0] == network)

    @property
    def networks(self) -> list[str]:
        """The networks, in order."""
        nets = [n.strip() for n in self.network.split(",") if n.strip()]
        return nets + [n for n in dict.fromkeys(e.split(":", 1)[0] for e in self.task_names) if n not in nets]

    def __post_init__(self):
        check_cost_models(self.cost_models)
        if self.tasks < 1 or self.trials < 1 or self.trials_per_iter < 1:
            raise InputError(f"tasks, trials and trials_per_iter must be >= 1, got {self.tasks}, {self.trials}, "
                             f"{self.trials_per_iter}")
        bad = [e for e in self.task_names if ":" not in e]
        if bad:
            raise InputError(f"task names must read <network>:<task>, got {bad}")
        bad = [e for e in self.model_trials
               if e.partition("=")[0] not in COST_MODELS or not e.partition("=")[2].isdigit()
               or int(e.partition("=")[2]) < 1]
        if bad:
            raise InputError(f"per-model trials must read <cost model>=<trials >= 1>, e.g. xgb=512; got {bad}")


def choose_tasks(db: ds.DeviceDatabase, network: str, count: int, names: tuple[str, ...] = ()) -> list[Task]:
    """Tasks of ``network`` that have a workload in ``db``: the ``count`` largest by weight x
    FLOPs, and those in ``names`` (a task name, or its prefix before an ``_``:
    ``fused_conv2d7`` picks ``fused_conv2d7_subtract5_...``), in weight x FLOPs order.

    Returns:
        :class:`cdmpp.tasks.Task` s, each with its ``rank``: its place in the network's
        weight x FLOPs order (0: the largest).

    Raises:
        UnknownNetworkError: the network is not in the manifest.
        InputError: a name matches no task of the network.
    """
    tasks = [t for t in db.manifest.get("tasks", []) if t["network"] == network]
    if not tasks:
        nets = sorted({t["network"] for t in db.manifest.get("tasks", [])})
        raise UnknownNetworkError(f"network {network!r} is not in this dataset; it has: {', '.join(nets)}")
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    tasks = [t for t in tasks if t["workload_key"] in index_of]
    tasks.sort(key=lambda t: -float(t["weight"]) * float(t.get("flops", 0.0)))
    ranked = [Task(t["task_name"], int(t["weight"]), db.workloads[index_of[t["workload_key"]]].mod, network=network,
                   flops=float(t.get("flops", 0.0)), workload_key=t["workload_key"], rank=r)
              for r, t in enumerate(tasks)]
    return pick_tasks(ranked, network, count, names)


def pick_tasks(ranked: list[Task], network: str, count: int, names: tuple[str, ...] = ()) -> list[Task]:
    """Of a network's tasks in rank order, the
    ``count`` largest and those in ``names`` (a task name, or its prefix before an ``_``).

    Raises:
        InputError: a name matches no task of the network.
    """
    def named(task_name, n):
        return task_name == n or task_name.startswith(n + "_")

    missing = [n for n in names if not any(named(t.name, n) for t in ranked)]
    if missing:
        raise InputError(f"{network} has no task named {', '.join(missing)}; its tasks: "
                         f"{', '.join(t.name[:40] for t in ranked[:12])}, ...")
    return [t for t in ranked if t.rank < count or any(named(t.name, n) for n in names)]


def _network_tasks(db: ds.DeviceDatabase, network: str, count: int, names: tuple[str, ...], target):
    """:func:`choose_tasks`, or for a network outside the zoo (:mod:`benchmarks.held_out`) its
    tasks extracted for ``target``."""

    if network in held_out_networks():
        return pick_tasks(held_out_tasks_of(network, target), network, count, names)
    return choose_tasks(db, network, count, names)


def best_so_far(run_secs: list[list[float] | None]) -> np.ndarray:
    """Best median latency (seconds) after each trial, float64 ``(T,)``; failed trials count as trials."""
    best, out = np.inf, []
    for secs in run_secs:
        if secs:
            best = min(best, float(np.median(secs)))
        out.append(best)
    return np.asarray(out, dtype=np.float64)


def run_records(work_dir: Path) -> list[tuple[int, list[float] | None]]:
    """``(workload index, run_secs or None when failed)`` of each measured trial of a work dir,
    in measurement order, from ``database_tuning_record.json`` or its gzipped copy.
    MetaSchedule's ``AddToDatabase`` stores a failed build or run as ``run_secs = [1e10]``."""
    path = ds.resolve(work_dir / ds.RECORD_FILE)
    if path is None:
        return []
    return [(r.workload_index, r.run_secs.tolist() if r.run_secs is not None else None) for r in read_records(path)]


def run_trials(work_dir: Path) -> list[list[float] | None]:
    """Measured trials of a ``tune_tir`` work dir, in measurement order (``None``: failed)."""
    return [secs for _, secs in run_records(work_dir)]


def run_tune_benchmark(dataset: Path, out_dir: Path, cfg: TuneBenchmarkConfig, progress: bool = True) -> list[dict]:
    """Tune the chosen tasks once per cost model on this CPU; resumable.

    Args:
        dataset: a device folder (or a dataset with one device) whose manifest lists
            ``cfg.network``; its workloads are tuned, for this host's target.

    Each run waits for a quiet machine first, and every timing batch runs on a quiet
    machine (the collector's guard, :func:`cdmpp.collect.quiet_runner`): a batch timed
    while another process was busy is timed again (``retimed_batches``).  The CPU other
    processes used over the whole run is ``other_cores`` (in cores; NaN for a run found
    finished).

    Returns:
        One row per (network, task, seed, cost model): ``network``, ``task``, ``weight``,
        ``seed``, ``cost_model``, ``trials`` (measured), ``other_cores``, ``retimed_batches``,
        ``best_at_<k>`` (seconds, for each ``k`` in
        ``cfg.checkpoints_at``), ``best`` (seconds) and ``tune_s`` (wall seconds of
        the run; 0 for a run found finished).

    Raises:
        DatasetError, ValueError: no such dataset or network, a bad config.
    """

    dirs = ds.device_dirs(Path(dataset))
    if len(dirs) != 1:
        raise ds.DatasetError(f"{dataset}: give one device folder")
    db = ds.load_device_dir(dirs[0], records=False)  # the manifest's tasks and the workloads pick the tasks
    listed = set(n.strip() for n in cfg.network.split(","))
    device = local_cpu()
    record_device(Path(out_dir), device)
    target = Target(device.target)
    chosen = [
        (net, task)
        for net in cfg.networks
        for task in _network_tasks(db, net, cfg.tasks if net in listed else 0, cfg.names_for(net), target)
    ]
    guard = QuietGuard(QuietConfig())
    load_tensor_intrinsics()
    rows = []
    single = len(cfg.networks) == 1 and not cfg.seeds
    for net, task in chosen:
        name, weight, mod, t_i = task.name, float(task.weight), task.mod, task.rank
        for seed in cfg.seeds or (cfg.seed,):
            for model_name in cfg.cost_models:
                task_dir = Path(out_dir) / ("" if single else net) / f"{t_i:02d}-{name}"[:80]
                trials = cfg.trials_for(model_name)
                work_dir = run_dir(task_dir / model_name, None if single else seed, trials)
                run = {"other_cores": float("nan"), "retimed_batches": 0, "tune_s": 0.0}
                if len(run_trials(work_dir)) < trials:  # not finished: start this run again from scratch
                    start_run(work_dir, guard, progress,
                               f"tuning {net} {name} with {model_name}, seed {seed} ({trials} trials)")
                    record_checkpoint(work_dir, model_name, cfg.checkpoint)
                    tools = search_tools(model_name, cfg.checkpoint, guard)
                    run = tuned_run(guard, work_dir, partial(
                        ms.tune_tir, mod, target, str(work_dir), max_trials_global=trials,
                        num_trials_per_iter=cfg.trials_per_iter, seed=seed, num_tuning_cores=device.cores, **tools))
                curve = best_so_far(run_trials(work_dir))
                row = {"network": net, "task": name, "weight": weight, "seed": seed, "cost_model": model_name,
                       "trials": int(curve.size), "other_cores": run["other_cores"],
                       "retimed_batches": run["retimed_batches"]}
                for k in cfg.checkpoints_at:
                    row[f"best_at_{k}"] = float(curve[min(k, curve.size) - 1]) if curve.size else float("nan")
                row["best"] = float(curve[-1]) if curve.size else float("nan")
                row["tune_s"] = run["tune_s"]
                rows.append(row)
    return rows


def run_seed(run: Path) -> int:
    """The seed of a run's work dir: ``N`` of a ``seedN`` folder, 0 for a run without one."""
    name = run.name
    return int(name[4:]) if name.startswith("seed") and name[4:].isdigit() else 0


def bench_runs(out_dir: Path):
    """``(task key, cost model, seed, work dir)`` of every run under ``out_dir`` with
    records, in seed order (by number: seed2 before seed10); the key reads
    ``"<network> <task>"``."""
    runs = {rec.parent for pattern in (ds.RECORD_FILE, f"{ds.RECORD_FILE}.gz") for rec in Path(out_dir).rglob(pattern)}
    for run in sorted(runs, key=lambda r: (str(r.parent if r.name.startswith("seed") else r), run_seed(r))):
        seed_dir = run.name.startswith("seed")
        model_dir = run.parent if seed_dir else run
        task_dir = model_dir.parent
        net = task_dir.parent.name if task_dir.parent != Path(out_dir) else ""
        short = task_dir.name.split("-", 1)[-1].split("_subtract")[0]  # "00-fused_conv2d16_subtract8_..." -> "fused_conv2d16"
        yield f"{net} {short}".strip(), model_dir.name, run_seed(run), run


def _finished_runs(out_dir: Path, value):
    """``{task key: {cost model: {seed: value(work dir, curve)}}}`` over the runs under
    ``out_dir`` with a measured trial (:func:`bench_runs`)."""
    out: dict[str, dict[str, dict]] = {}
    for key, model, seed, run in bench_runs(out_dir):
        curve = best_so_far(run_trials(run))
        if curve.size and np.isfinite(curve[-1]):
            out.setdefault(key, {}).setdefault(model, {})[seed] = value(run, curve)
    return out


def tuning_curves(out_dir: Path) -> dict[str, dict[str, dict[int, np.ndarray]]]:
    """Best-so-far curves (seconds, float64 ``(T,)``) of every finished run under ``out_dir``,
    as ``{"<network> <task dir>": {cost model: {seed: curve}}}``."""
    return _finished_runs(out_dir, lambda _run, curve: curve)


def tuning_walls(out_dir: Path, trials: int) -> dict[str, dict[str, dict[int, float | None]]]:
    """Wall seconds of each run under ``out_dir`` until its ``trials``-th trial
    (:func:`seconds_to_trials`; ``None`` where not logged), keyed and ordered as
    :func:`tuning_curves`."""
    return _finished_runs(out_dir, lambda run, _curve: seconds_to_trials(run, trials))


def trials_to_reach(curve: np.ndarray, target_s: float) -> int | None:
    """The first trial (1-based) whose best-so-far latency is at most ``target_s``; ``None`` if never."""
    hit = np.nonzero(curve <= target_s * (1 + 1e-9))[0]
    return int(hit[0]) + 1 if hit.size else None


def with_reference(
    curves: dict[str, dict[str, list]], reference: dict[str, dict[str, list]], name: str | None = None
) -> tuple[dict[str, dict[str, list]], str]:
    """``curves`` with, in each task that ``reference`` (another run's :func:`tuning_curves`)
    also tuned, its XGBoost runs added as the yardstick ``"xgb <T>"`` (``T``: their
    trials, e.g. 512 from ``--trials-for xgb=512``).  Returns ``(curves, yardstick name)``;
    the name is ``"xgb"`` when ``reference`` holds no XGBoost run.  ``name`` names the
    yardstick instead, for per-run values other than curves (:func:`tuning_walls`)."""
    runs = [c for models in reference.values() for c in models.get("xgb", {}).values()]
    if not runs:
        return curves, "xgb"
    name = name or f"xgb {max(c.size for c in runs)}"
    out = {task: dict(models) for task, models in curves.items()}
    for task, models in out.items():
        if reference.get(task, {}).get("xgb"):
            models[name] = reference[task]["xgb"]
    return out, name


def reach_table(
    curves: dict[str, dict[str, dict[int, np.ndarray]]], markdown: bool = True, yardstick: str = "xgb"
) -> str:
    """Per task and cost model: mean final best relative to the yardstick's (per seed),
    and in how many trials each seed reached its own seed's yardstick final best (seeds
    paired by number; the yardstick is XGBoost's runs, or a longer reference run of it,
    :func:`with_reference`)."""

    head = ["task", "cost model", "seeds", f"final best / {yardstick}'s",  # seeds: those paired with the yardstick
            f"trials to reach {yardstick}'s final best (per seed)"]
    body = []
    for task, models in curves.items():
        xgb = models.get(yardstick, {})
        for model, runs in sorted(models.items()):
            paired = sorted(set(runs) & set(xgb))
            ratio = [runs[s][-1] / xgb[s][-1] for s in paired]
            reach = [trials_to_reach(runs[s], xgb[s][-1]) for s in paired]
            body.append([
                task, model, str(len(ratio) or len(runs)), f"{np.mean(ratio):.2f}" if ratio else "-",
                ", ".join("never" if t is None else str(t) for t in reach) or "-",
            ])
    return render_table(head, body, markdown)


def ratio_summary(
    curves: dict[str, dict[str, dict[int, np.ndarray]]], yardstick: str = "xgb", at: tuple[int, ...] = (8, 16, 32, 64),
    markdown: bool = True, walls: dict[str, dict[str, dict[int, float | None]]] | None = None,
) -> str:
    """Each cost model's best after ``k`` trials (each ``k`` of ``at``) over the same seed's
    yardstick final best, averaged over the tasks of each seed, then over the seeds (with
    the lowest and highest seed mean): the benchmark's summary table (the goal is a mean of
    at most 1.00 for ``cdmpp`` at 64 trials against ``"xgb 512"``).

    Seeds are paired by number with the yardstick's runs, as in :func:`reach_table`; a task
    counts for a seed only where both ran.  ``reached``: tasks whose best is at most the
    yardstick's final best within ``max(at)`` trials.  The yardstick's own row gives its
    run at ``k`` trials (e.g. XGBoost 64 trials into its 512-trial run).

    Args:
        curves: :func:`tuning_curves` output, the yardstick included (:func:`with_reference`).
        walls: :func:`tuning_walls` at ``max(at)`` trials, keyed as ``curves``: adds the mean
            wall seconds to ``max(at)`` trials over the runs that logged it.

    Returns:
        A table with one row per cost model and seed, and a mean row per cost model that ran
        more than one seed; ``"-"`` where no run is ``k`` trials long.
    """

    per: dict[tuple[str, int], dict] = {}
    for task, models in curves.items():
        ys = models.get(yardstick, {})
        for model, runs in models.items():
            wall = (walls or {}).get(task, {}).get(model, {})
            for seed in sorted(set(runs) & set(ys)):
                run, ref = runs[seed], ys[seed]
                d = per.setdefault((model, seed), {"tasks": 0, "reached": 0, "ratios": {k: [] for k in at}, "wall": []})
                d["tasks"] += 1
                if wall.get(seed) is not None:
                    d["wall"].append(wall[seed])
                d["reached"] += trials_to_reach(run[: max(at)], ref[-1]) is not None
                for k in at:
                    if run.size >= k:
                        d["ratios"][k].append(run[k - 1] / ref[-1])

    def mean_or_none(v):
        return float(np.mean(v)) if v else None

    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    head = ["cost model", "seed", "tasks", *(f"after {k}" for k in at), f"reached in {max(at)}"]
    head += [f"wall to {max(at)} trials, s"] if walls is not None else []
    body = []
    for model in sorted({m for m, _ in per}):
        seeds = sorted(s for m, s in per if m == model)
        means = {s: {k: mean_or_none(per[(model, s)]["ratios"][k]) for k in at} for s in seeds}
        wall_means = {s: mean_or_none(per[(model, s)]["wall"]) for s in seeds}
        for s in seeds:
            d = per[(model, s)]
            body.append([model, str(s), str(d["tasks"]), *(fmt(means[s][k]) for k in at),
                         f"{d['reached']} of {d['tasks']}"]
                        + ([f"{wall_means[s]:.1f}" if wall_means[s] is not None else "-"] if walls is not None else []))
        if len(seeds) > 1:
            cells = []
            for k in at:
                v = [means[s][k] for s in seeds if means[s][k] is not None]
                cells.append(f"{np.mean(v):.3f} ({min(v):.3f}-{max(v):.3f})" if v else "-")
            reached = sum(per[(model, s)]["reached"] for s in seeds)
            all_walls = [w for s in seeds for w in per[(model, s)]["wall"]]
            body.append([model, "mean (min-max)", str(sum(per[(model, s)]["tasks"] for s in seeds)), *cells,
                         f"{reached} of {sum(per[(model, s)]['tasks'] for s in seeds)}"]
                        + ([f"{np.mean(all_walls):.1f}" if all_walls else "-"] if walls is not None else []))
    return render_table(head, body, markdown)


def format_tune_benchmark(rows: list[dict], markdown: bool = False) -> str:
    """The rows as a table: best latency in microseconds after k trials, per task and cost model."""

    if not rows:
        return "(no rows)"
    ks = [c for c in rows[0] if c.startswith("best_at_")]
    head = ["task", "cost model", "seed", "trials", *(f"best@{c[8:]} us" for c in ks), "tune s"]
    body = [
        [r["task"], r["cost_model"], str(r.get("seed", 0)), str(r["trials"]), *(f"{1e6 * r[c]:.1f}" for c in ks),
         f"{r['tune_s']:.0f}"]
        for r in rows
    ]
    return render_table(head, body, markdown)


def write_tune_benchmark(rows: list[dict], out_dir: Path, first_line: str | None = None) -> tuple[Path, Path]:
    """Write ``tune_benchmark.csv`` and ``tune_benchmark.md`` into ``out_dir``; returns their paths.

    ``first_line``: put above the markdown table (the plugin's checkpoint line)."""

    return write_csv_and_markdown(rows, out_dir, "tune_benchmark", format_tune_benchmark(rows, markdown=True),
                                  first_line)
