"""``cdmpp tune-benchmark``: does the cost-model plugin find faster schedules in fewer trials?

For each chosen task, MetaSchedule's own tuner (``tune_tir``: evolutionary search,
builds on all cores, timings one at a time on this CPU) runs once per cost model
with the same seed and trial budget: TVM's ``XGBModel`` (trained online on the
task's measurements, TVM's default), :class:`~cdmpp.serve.cost_model.CdmppCostModel`
(a trained checkpoint, no online update), and optionally ``random`` scores.  The
measured trials are kept as MetaSchedule tuning records in one work dir per run, so
a stopped benchmark resumes where it stopped and every trial is a real measurement.
The figure of merit is the best measured latency after ``k`` trials (TenSet,
NeurIPS 2021, section 6, uses the same search-curve comparison).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdmpp.errors import InputError, UnknownNetworkError
from cdmpp import dataset as ds

COST_MODELS = ("xgb", "cdmpp", "random")


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

    @property
    def networks(self) -> list[str]:
        """The networks, in order."""
        return [n.strip() for n in self.network.split(",") if n.strip()]

    def __post_init__(self):
        bad = [m for m in self.cost_models if m not in COST_MODELS]
        if bad:
            raise InputError(f"unknown cost models {bad}; choose from {COST_MODELS}")
        if self.tasks < 1 or self.trials < 1 or self.trials_per_iter < 1:
            raise InputError(f"tasks, trials and trials_per_iter must be >= 1, got {self.tasks}, {self.trials}, "
                             f"{self.trials_per_iter}")


def choose_tasks(db: ds.DeviceDatabase, network: str, count: int) -> list[tuple[str, float, object]]:
    """The ``count`` tasks of ``network`` with the largest weight x FLOPs that have a workload in ``db``.

    Returns:
        ``(task_name, weight, workload IRModule)`` per task.

    Raises:
        ValueError: the network is not in the manifest.
    """
    tasks = [t for t in db.manifest.get("tasks", []) if t["network"] == network]
    if not tasks:
        nets = sorted({t["network"] for t in db.manifest.get("tasks", [])})
        raise UnknownNetworkError(f"network {network!r} is not in this dataset; it has: {', '.join(nets)}")
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    tasks = [t for t in tasks if t["workload_key"] in index_of]
    tasks.sort(key=lambda t: -float(t["weight"]) * float(t.get("flops", 0.0)))
    return [(t["task_name"], float(t["weight"]), db.workloads[index_of[t["workload_key"]]].mod) for t in tasks[:count]]


def best_so_far(run_secs: list[list[float] | None]) -> np.ndarray:
    """Best median latency (seconds) after each trial, float64 ``(T,)``; failed trials count as trials."""
    best, out = np.inf, []
    for secs in run_secs:
        if secs:
            best = min(best, float(np.median(secs)))
        out.append(best)
    return np.asarray(out, dtype=np.float64)


def _trials(work_dir: Path) -> list[list[float] | None]:
    """Measured trials of a ``tune_tir`` work dir, in measurement order (``None``: failed).

    MetaSchedule's ``AddToDatabase`` stores a failed build or run as ``run_secs = [1e10]``.
    """
    path = work_dir / ds.RECORD_FILE
    if not path.exists():
        return []
    out = []
    for _, obj in ds.iter_json_lines(path):
        secs = obj[1][1] if isinstance(obj, list) and len(obj) > 1 and isinstance(obj[1], list) else None
        ok = bool(secs) and all(float(s) < 1e9 for s in secs)
        out.append([float(s) for s in secs] if ok else None)
    return out


def run_tune_benchmark(dataset: Path, out_dir: Path, cfg: TuneBenchmarkConfig, progress: bool = True) -> list[dict]:
    """Tune the chosen tasks once per cost model on this CPU; resumable.

    Args:
        dataset: a device folder (or a dataset with one device) whose manifest lists
            ``cfg.network``; its workloads are tuned, for this host's target.

    Each run waits for a quiet machine first (the collector's guard) and records the
    CPU other processes used during it (``other_cores``, in cores; NaN for a run found
    finished).

    Returns:
        One row per (network, task, seed, cost model): ``network``, ``task``, ``weight``,
        ``seed``, ``cost_model``, ``trials`` (measured), ``other_cores``, ``best_at_<k>`` (seconds, for each ``k`` in
        ``cfg.checkpoints_at``), ``best`` (seconds) and ``tune_s`` (wall seconds of
        the run; 0 for a run found finished).

    Raises:
        DatasetError, ValueError: no such dataset or network, a bad config.
    """
    # pylint: disable=import-outside-toplevel
    from cdmpp.collect import MeasureConfig, QuietConfig, QuietGuard, _build_tmpdir
    from cdmpp.device import local_cpu
    from cdmpp.tvm_compat import (
        LocalBuilder,
        LocalRunner,
        Target,
        build_for_measurement,
        load_tensor_intrinsics,
        ms,
    )

    from .cost_model import CdmppCostModel

    dirs = ds.device_dirs(Path(dataset))
    if len(dirs) != 1:
        raise ds.DatasetError(f"{dataset}: give one device folder")
    db = ds.load_device_dir(dirs[0])
    chosen = [(net, t_i, task) for net in cfg.networks for t_i, task in enumerate(choose_tasks(db, net, cfg.tasks))]
    device = local_cpu()
    target = Target(device.target)
    m = MeasureConfig()
    guard = QuietGuard(QuietConfig())
    load_tensor_intrinsics()
    rows = []
    single = len(cfg.networks) == 1 and not cfg.seeds
    for net, t_i, (name, weight, mod) in chosen:
        for seed in cfg.seeds or (cfg.seed,):
            for model_name in cfg.cost_models:
                task_dir = Path(out_dir) / ("" if single else net) / f"{t_i:02d}-{name}"[:80]
                work_dir = task_dir / model_name if single else task_dir / model_name / f"seed{seed}"
                tune_s, load = 0.0, float("nan")
                if len(_trials(work_dir)) < cfg.trials:  # not finished: start this run again from scratch
                    for f in (ds.RECORD_FILE, ds.WORKLOAD_FILE):
                        (work_dir / f).unlink(missing_ok=True)
                    work_dir.mkdir(parents=True, exist_ok=True)
                    guard.wait_quiet(lambda msg: print(msg, flush=True) if progress else None)
                    if progress:
                        print(f"tuning {net} {name} with {model_name}, seed {seed} ({cfg.trials} trials)", flush=True)
                    cost_model = (
                        CdmppCostModel(str(cfg.checkpoint) if cfg.checkpoint else None)
                        if model_name == "cdmpp" else model_name
                    )
                    evaluator = m.evaluator_config()
                    t0 = time.perf_counter()
                    start = guard.snapshot()
                    with _build_tmpdir(work_dir / "tmp"):  # the builders' temporary files, removed after
                        ms.tune_tir(
                            mod,
                            target,
                            str(work_dir),
                            max_trials_global=cfg.trials,
                            num_trials_per_iter=cfg.trials_per_iter,
                            builder=LocalBuilder(timeout_sec=m.build_timeout_s, f_build=build_for_measurement),
                            runner=LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=evaluator),
                            cost_model=cost_model,
                            seed=seed,
                            num_tuning_cores=device.cores,
                        )
                    load = guard.other_cores(start)
                    tune_s = time.perf_counter() - t0
                curve = best_so_far(_trials(work_dir))
                row = {"network": net, "task": name, "weight": weight, "seed": seed, "cost_model": model_name,
                       "trials": int(curve.size), "other_cores": round(load, 3)}
                for k in cfg.checkpoints_at:
                    row[f"best_at_{k}"] = float(curve[min(k, curve.size) - 1]) if curve.size else float("nan")
                row["best"] = float(curve[-1]) if curve.size else float("nan")
                row["tune_s"] = round(tune_s, 1)
                rows.append(row)
    return rows


def tuning_curves(out_dir: Path) -> dict[str, dict[str, list[np.ndarray]]]:
    """Best-so-far curves (seconds, float64 ``(T,)``) of every finished run under ``out_dir``,
    as ``{"<network> <task dir>": {cost model: [one curve per seed]}}``."""
    out: dict[str, dict[str, list[np.ndarray]]] = {}
    for rec in sorted(Path(out_dir).rglob(ds.RECORD_FILE)):
        run = rec.parent
        seed_dir = run.name.startswith("seed")
        model_dir = run.parent if seed_dir else run
        task_dir = model_dir.parent
        net = task_dir.parent.name if task_dir.parent != Path(out_dir) else ""
        short = task_dir.name.split("-", 1)[-1].split("_subtract")[0]  # "00-fused_conv2d16_subtract8_..." -> "fused_conv2d16"
        key = f"{net} {short}".strip()
        curve = best_so_far(_trials(run))
        if curve.size and np.isfinite(curve[-1]):
            out.setdefault(key, {}).setdefault(model_dir.name, []).append(curve)
    return out


def trials_to_reach(curve: np.ndarray, target_s: float) -> int | None:
    """The first trial (1-based) whose best-so-far latency is at most ``target_s``; ``None`` if never."""
    hit = np.nonzero(curve <= target_s * (1 + 1e-9))[0]
    return int(hit[0]) + 1 if hit.size else None


def reach_table(curves: dict[str, dict[str, list[np.ndarray]]], markdown: bool = True) -> str:
    """Per task and cost model: mean final best relative to XGBoost's (per seed), and in
    how many trials each seed reached its own seed's XGBoost final best."""
    from cdmpp.train.benchmark import render_table  # pylint: disable=import-outside-toplevel

    head = ["task", "cost model", "seeds", "final best / xgb's", "trials to reach xgb's final best (per seed)"]
    body = []
    for task, models in curves.items():
        xgb = models.get("xgb", [])
        for model, runs in sorted(models.items()):
            ratio = [r[-1] / x[-1] for r, x in zip(runs, xgb)] if xgb else []
            reach = [trials_to_reach(r, x[-1]) for r, x in zip(runs, xgb)] if xgb else []
            body.append([
                task, model, str(len(runs)), f"{np.mean(ratio):.2f}" if ratio else "-",
                ", ".join("never" if t is None else str(t) for t in reach) or "-",
            ])
    return render_table(head, body, markdown)


def format_tune_benchmark(rows: list[dict], markdown: bool = False) -> str:
    """The rows as a table: best latency in microseconds after k trials, per task and cost model."""
    from cdmpp.train.benchmark import render_table  # pylint: disable=import-outside-toplevel

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


def write_tune_benchmark(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    """Write ``tune_benchmark.csv`` and ``tune_benchmark.md`` into ``out_dir``; returns their paths."""
    from cdmpp.train.benchmark import write_csv_and_markdown  # pylint: disable=import-outside-toplevel

    return write_csv_and_markdown(rows, out_dir, "tune_benchmark", format_tune_benchmark(rows, markdown=True))
