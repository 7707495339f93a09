"""``cdmpp tune``: tune a whole network with MetaSchedule, guided by cdmpp's cost model, and build it.

MetaSchedule tunes every task of the network with one global trial budget (its
gradient task scheduler divides it among the tasks; the tasks the deployed network runs
as views of their input are left out, as they run no kernel), scoring candidates
with :class:`cdmpp.tuning.cost_model.CdmppCostModel` (or TVM's ``XGBModel``).  The trials
go to a JSONDatabase in the work dir as they are measured; the network is then compiled
with that database (``compile_relax``) into a shared library.

A work dir that already holds trials is resumed: only the trials missing from the budget
are tuned, and every kept trial stays in the database.
"""

from __future__ import annotations

import csv
import functools
import itertools
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import dataset as ds
from ..errors import InputError
from ..records import iter_json_lines, read_records, read_workload_keys
from .config import TuneConfig

LIBRARY_FILE = "network.so"
WEIGHTS_FILE = "weights.npz"
TASKS_FILE = "tasks.csv"


@dataclass
class TaskRow:
    """One task of the tuned network.

    Attributes:
        task: MetaSchedule's task name.
        weight: how often the task runs in the network.
        trials: measured trials of its workload in the database.
        best_s: the fastest measured latency (median of its repeats), seconds; NaN if none.
        predicted_s: cdmpp's prediction for that fastest schedule (trace included), seconds.
        view: the deployed network runs the task as a view of its input, no kernel
            (:func:`cdmpp.tvm_compat.runs_as_view`): not tuned, and out of the tuned sum.
    """

    task: str
    weight: int
    trials: int
    best_s: float
    predicted_s: float
    view: bool = False


@dataclass
class TuneResult:
    """What :func:`tune_network` left in the work dir.

    Attributes:
        work_dir: the JSONDatabase folder.
        library: the compiled network (``None`` when interrupted).
        tasks: one row per task.
        kept_trials: trials found in the work dir before tuning.
        new_trials: trials measured now.
        interrupted: tuning stopped on Ctrl-C (every finished trial is kept).
        default_schedule_tasks: tasks whose fastest record did not compile, built from
            their default schedule instead (their trials stay in the database).
        trials_per_iter: the trials per search iteration used (lowered from the config's
            so that every task gets a first round within the budget).
    """

    work_dir: Path
    library: Path | None
    tasks: list[TaskRow] = field(default_factory=list)
    kept_trials: int = 0
    new_trials: int = 0
    interrupted: bool = False
    default_schedule_tasks: list[str] = field(default_factory=list)
    trials_per_iter: int = 0

    @property
    def tuned_sum_s(self) -> float:
        """Sum of task weight x fastest measured latency over the tasks that have one
        (:attr:`unmeasured` and views left out), seconds."""
        return float(sum(t.weight * t.best_s for t in self.tasks if np.isfinite(t.best_s) and not t.view))

    @property
    def unmeasured(self) -> list[TaskRow]:
        """The tasks other than views without a successful trial (none tuned yet, or every
        trial failed, as for a gather whose index the measurement fills with random values);
        the compiled network runs them unscheduled."""
        return [t for t in self.tasks if not np.isfinite(t.best_s) and not t.view]


def count_trials(work_dir: Path) -> int:
    """Tuning records in a work dir's JSONDatabase (0 when it has none)."""
    path = ds.resolve(Path(work_dir) / ds.RECORD_FILE)
    if path is None:
        return 0
    return sum(1 for _ in iter_json_lines(path, []))


def _watch(work_dir: Path, total: int, start: int, stop: threading.Event) -> None:
    """A progress bar of the trials in the work dir, updated every 2 s until ``stop``."""
    from tqdm import tqdm  # noqa: PLC0415  (only with progress shown)

    with tqdm(total=total, initial=start, desc="trials", unit="trial", dynamic_ncols=True) as bar:
        while not stop.wait(2.0):
            n = min(count_trials(work_dir), total)
            bar.update(n - bar.n)
        bar.update(min(count_trials(work_dir), total) - bar.n)


def gather_safe_measurers(m=None) -> tuple:
    """A MetaSchedule builder and runner pair that measures gathers with in-range indices.

    MetaSchedule's ``LocalRunner`` fills every argument with TVM's random fill, so the
    index argument of a gather (``take``: an embedding lookup) points far outside its
    table and the run fails; a tuner then keeps no successful trial of such a task and
    the compiled network runs it unscheduled.  The builder notes, for each program it
    builds, where its integer arguments index and how far
    (:func:`cdmpp.collect.index_bounds`); the runner times each program with those
    arguments filled with in-range indices (:func:`cdmpp.tvm_compat.alloc_arguments_in_bounds`),
    as ``cdmpp collect`` does.  Other programs are measured as ``LocalRunner`` measures them.

    Args:
        m: the timing protocol (:class:`cdmpp.collect.MeasureConfig`; default the collector's).

    Returns:
        ``(builder, runner)``: an ``ms.builder.PyBuilder`` around ``LocalBuilder`` and an
        ``ms.runner.PyRunner`` around ``LocalRunner``, for ``tune_relax``/``tune_tir``.
    """
    from ..collect import MeasureConfig, index_bounds  # noqa: PLC0415  (keeps tvm off this module's import)
    from ..tvm_compat import (  # noqa: PLC0415  (tvm)
        LocalBuilder,
        LocalRunner,
        alloc_arguments_in_bounds,
        build_for_measurement,
        derived_object,
        ms,
    )

    m = m or MeasureConfig()
    builder = LocalBuilder(timeout_sec=m.build_timeout_s, f_build=build_for_measurement)
    runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=m.evaluator_config())
    bounds_of: dict[str, tuple] = {}  # artifact path -> index bounds, from build to run

    @derived_object
    class GatherSafeBuilder(ms.builder.PyBuilder):
        def build(self, build_inputs):
            results = builder.build(build_inputs)
            for inp, res in zip(build_inputs, results):
                if res.artifact_path is not None:
                    try:
                        bounds_of[str(res.artifact_path)] = index_bounds(inp.mod)
                    except Exception:  # noqa: BLE001  an unreadable program is measured as TVM would
                        bounds_of[str(res.artifact_path)] = ()
            return results

    @derived_object
    class GatherSafeRunner(ms.runner.PyRunner):
        def run(self, runner_inputs):
            futures = []
            for bounds, group in itertools.groupby(runner_inputs,
                                                   key=lambda r: bounds_of.pop(str(r.artifact_path), ())):
                runner.f_alloc_argument = (functools.partial(alloc_arguments_in_bounds, index_bounds=bounds)
                                           if bounds else None)
                futures += runner.run(list(group))  # submitted and waited on here, with this fill
            runner.f_alloc_argument = None
            return futures

    return GatherSafeBuilder(), GatherSafeRunner()


def _search_tools(cfg: TuneConfig, device: str | None) -> dict:
    """``cost_model``, ``strategy``, ``builder`` and ``runner`` of :func:`tune_kernels`: the collector's measuring
    protocol, gathers measured with in-range indices (:func:`gather_safe_measurers`)."""
    from .cost_model import CdmppCostModel  # noqa: PLC0415  (keeps torch off this module's import)

    model = (CdmppCostModel(str(cfg.checkpoint) if cfg.checkpoint else None, online=cfg.online, device=device,
                            precision=cfg.precision)
             if cfg.cost_model == "cdmpp" else "xgb")
    builder, runner = gather_safe_measurers()
    return {"cost_model": model, "strategy": cfg.search.strategy(), "builder": builder, "runner": runner}


def task_rows(tasks: list, work_dir: Path, predictor, target, device: str | None) -> list[TaskRow]:
    """One :class:`TaskRow` per task from the work dir's records: trials, the fastest
    measured record, and ``predictor``'s prediction for it (its trace included)."""
    from ..estimate import best_records  # noqa: PLC0415  (keeps tvm off this module's import)
    from ..tvm_compat import runs_as_view, structural_hash  # noqa: PLC0415  (tvm)

    views = [runs_as_view(t.mod) for t in tasks]
    files = ds.database_files(work_dir, required=False)
    if files is None:
        return [TaskRow(t.name, t.weight, 0, float("nan"), float("nan"), v) for t, v in zip(tasks, views)]
    wl, rec = files
    best = best_records([obj for _, obj in iter_json_lines(wl, [])], [obj for _, obj in iter_json_lines(rec, [])])
    wl_keys = read_workload_keys(wl, [])
    counts: dict[str, int] = {}
    for r in read_records(rec, [], n_workloads=len(wl_keys)):
        counts[wl_keys[r.workload_index]] = counts.get(wl_keys[r.workload_index], 0) + 1
    keys = [str(structural_hash(t.mod)) for t in tasks]
    found = [k for k in keys if k in best]
    predicted = {}
    if found:
        pred = predictor.predict_each([best[k][1].record for k in found], target, device,
                                      [f"the fastest record of {k}" for k in found])
        predicted = dict(zip(found, pred.latency_s.tolist()))
    rows = []
    for t, k, v in zip(tasks, keys, views):
        b = best.get(k)
        rows.append(TaskRow(t.name, t.weight, counts.get(k, 0), b[1].measured_s if b else float("nan"),
                            float(predicted.get(k, float("nan"))), v))
    return rows


def tune_network(network: str, work_dir: Path, target, cfg: TuneConfig | None = None, device: str | None = None,
                 progress: bool = True, log=print) -> TuneResult:
    """Tune a whole network (:func:`tune_kernels`) with the chosen cost model, compile it with
    the tuning database, and write the per-task table; resumable.

    Args:
        network: a zoo name, a Relax JSON file or ``module.py:function``
            (:func:`cdmpp.network_input.load_relax`).
        work_dir: the JSONDatabase folder (created; an existing one is resumed).
        target: the TVM target tuned and compiled for (``Target``, dict or tag).
        cfg: the budget and the cost model.
        device: the checkpoint's device id that the plugin predicts for (default: the
            one the target picks).
        progress: show a progress bar of the trials.
        log: where the steps are told.

    Returns:
        :class:`TuneResult`.  Writes ``work_dir/database_*.json``, ``network.so`` (the
        Relax VM executable; ``main`` takes the inputs, then the weights),
        ``weights.npz`` (those weights, in order) and ``tasks.csv``.  On Ctrl-C it
        returns with ``interrupted`` set, every finished trial kept, nothing compiled.

    Raises:
        InputError, UnknownNetworkError: a bad network; UnknownDeviceError: a bad device.
    """
    from ..estimate import relax_tasks  # noqa: PLC0415  (keeps tvm off this module's import)
    from ..network_input import load_relax  # noqa: PLC0415  (keeps torch off this module's import)
    from ..predictor import LatencyPredictor  # noqa: PLC0415  (keeps torch off this module's import)
    from ..tvm_compat import Target, load_tensor_intrinsics, ms, runs_as_view  # noqa: PLC0415  (tvm)

    cfg = cfg or TuneConfig()
    work_dir = Path(work_dir)
    target = target if isinstance(target, Target) else Target(target)
    net = load_relax(network, target)
    tasks = relax_tasks(net.mod, target)
    n_views = sum(runs_as_view(t.mod) for t in tasks)
    n_tuned = len(tasks) - n_views
    work_dir.mkdir(parents=True, exist_ok=True)
    for f in (ds.WORKLOAD_FILE, ds.RECORD_FILE):  # a work dir kept only gzipped
        ds.unpack(work_dir / f)
    kept = count_trials(work_dir)
    result = TuneResult(work_dir, None, kept_trials=kept)
    todo = cfg.trials - kept
    result.trials_per_iter = first_round_trials(cfg.trials, cfg.trials_per_iter, n_tuned)
    log(f"{net.name}: {len(tasks)} tasks ({n_views} run as views, not tuned); {kept} trials kept in {work_dir}, "
        f"{max(todo, 0)} to tune ({cfg.cost_model} cost model, {result.trials_per_iter} trials per task and round)")
    if cfg.trials < n_tuned:
        log(f"warning: {cfg.trials} trials cannot give each of the {n_tuned} tasks a first round; "
            f"tasks without a trial run their default schedule (--trials {n_tuned} or more gives each one)")
    if todo > 0 and n_tuned:
        load_tensor_intrinsics(target)
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(work_dir, cfg.trials, kept, stop), daemon=True)
        if progress:
            watcher.start()
        try:
            tune_kernels(net.mod, target, work_dir, todo, result.trials_per_iter, cfg.seed, _search_tools(cfg, device))
        except KeyboardInterrupt:
            result.interrupted = True
        finally:
            stop.set()
            if progress:
                watcher.join()
    result.new_trials = count_trials(work_dir) - kept
    predictor = LatencyPredictor.load(cfg.checkpoint)
    device_id = getattr(predictor.device_of(device, target), "device_id", None)
    result.tasks = task_rows(tasks, work_dir, predictor, target, device_id)
    write_tasks(result.tasks, work_dir / TASKS_FILE)
    if result.interrupted:
        log(f"interrupted: {count_trials(work_dir)} trials kept in {work_dir}; the same command resumes")
        return result
    database = ms.database.JSONDatabase(path_workload=str(work_dir / ds.WORKLOAD_FILE),
                                        path_tuning_record=str(work_dir / ds.RECORD_FILE))
    executable, result.default_schedule_tasks = build_network(database, net.unfused, tasks, target, work_dir)
    if result.default_schedule_tasks:
        log(f"built from their default schedule (their fastest record did not compile): "
            f"{', '.join(result.default_schedule_tasks)}")
    result.library = work_dir / LIBRARY_FILE
    executable.export_library(str(result.library))
    np.savez(work_dir / WEIGHTS_FILE, *[p.numpy() for p in net.params])
    return result


def tune_kernels(mod, target, work_dir: Path, trials: int, trials_per_iter: int, seed: int, tools: dict) -> None:
    """``tune_relax`` without the tasks the deployed network runs as views: extract the
    tuning tasks of the Relax module ``mod``, drop those :func:`cdmpp.tvm_compat.runs_as_view`
    flags (the build turns them into ``R.reshape``; a trial of theirs is never run), and
    tune the others with one global budget of ``trials`` into ``work_dir``'s JSONDatabase.

    Args:
        tools: ``cost_model``, ``strategy``, ``builder`` and ``runner`` (:func:`_search_tools`).
    """
    from ..tvm_compat import ms, runs_as_view  # noqa: PLC0415  (tvm)

    ri = ms.relax_integration
    kernels = [t for t in ri.extract_tasks(mod, target) if not runs_as_view(t.dispatched[0])]
    tools = dict(tools)
    contexts, weights = ri.extracted_tasks_to_tune_contexts(kernels, str(work_dir), strategy=tools.pop("strategy", "evolutionary"),
                                                            seed=seed)
    ms.tune.tune_tasks(tasks=contexts, task_weights=weights, work_dir=str(work_dir), max_trials_global=trials,
                       num_trials_per_iter=trials_per_iter, **tools)


def first_round_trials(trials: int, trials_per_iter: int, n_tasks: int) -> int:
    """Trials per search iteration such that each of ``n_tasks`` tasks gets a first round
    within the global budget: ``trials_per_iter``, lowered to ``trials // n_tasks``
    (at least 1) when the budget is smaller than a round of every task.

    MetaSchedule's gradient task scheduler tunes the tasks round-robin first, one
    iteration each; a budget spent before the last task's turn leaves it untuned.
    """
    return max(1, min(trials_per_iter, trials // max(n_tasks, 1)))


def _fails_to_build(mod, target) -> str | None:
    """The error (one line) of building one scheduled or unscheduled PrimFunc module
    alone, as the measuring builder builds it; ``None`` when it builds."""
    from ..tvm_compat import build_for_measurement  # noqa: PLC0415  (tvm)

    try:
        build_for_measurement(mod, target)
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        return (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
    return None


def build_network(database, unfused, tasks: list, target, work_dir: Path) -> tuple[object, list[str]]:
    """Compile a network with its tuning database (``compile_relax``), building a task
    from its default schedule where its fastest record does not compile.

    Compiles at once when it can.  When the compile fails, each task's fastest record is
    built alone; the tasks whose record fails are compiled from their default schedule
    (the database keeps every trial; only the compile leaves those records out).  When
    that compile fails too, each task is built alone from its default schedule, and the
    error names those that fail.

    Args:
        database: the work dir's MetaSchedule ``Database``.
        unfused: the per-call Relax module before fusion.
        tasks: the network's tasks (:class:`cdmpp.tasks.Task`).
        target: the ``Target``.
        work_dir: the work dir (named in the error).

    Returns:
        ``(the Relax VM executable, names of the tasks built from their default schedule)``.

    Raises:
        InputError: the network does not compile even so; it names each task that does
            not build from its default schedule either, and says the work dir is kept.
    """
    from ..tvm_compat import Schedule, ms, structural_hash  # noqa: PLC0415  (tvm)

    try:
        return ms.relax_integration.compile_relax(database, unfused, target, params=None), []
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        first = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
    broken, hashes = [], set()
    for t in tasks:
        rec = database.query_tuning_record(t.mod, target, t.name)
        if rec is None:
            continue
        sch = Schedule(t.mod)
        rec.trace.apply_to_schedule(sch, remove_postproc=False)
        if _fails_to_build(sch.mod, target) is not None:
            broken.append(t.name)
            hashes.add(int(structural_hash(t.mod)))
    kept = ms.database.MemoryDatabase()
    for rec in database.get_all_tuning_records():
        if int(structural_hash(rec.workload.mod)) not in hashes:
            kept.commit_tuning_record(ms.database.TuningRecord(rec.trace, kept.commit_workload(rec.workload.mod),
                                                               rec.run_secs, rec.target, rec.args_info))
    try:
        return ms.relax_integration.compile_relax(kept, unfused, target, params=None), broken
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        why = (str(err).strip().splitlines() or [type(err).__name__])[-1][:300]
        unbuildable = [f"{t.name} ({e})" for t in tasks if (e := _fails_to_build(t.mod, target)) is not None]
        named = (f"these tasks do not build even from their default schedule: {'; '.join(unbuildable)}" if unbuildable
                 else f"every task builds alone (from its default schedule: {', '.join(broken) or 'none'})")
        raise InputError(f"the network does not compile ({why or first}); {named}. "
                         f"Every trial is kept in {work_dir}") from err


def write_tasks(rows: list[TaskRow], path: Path) -> None:
    """Write the task rows as CSV (seconds)."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["task", "weight", "trials", "best_s", "predicted_s", "view"])
        for r in rows:
            w.writerow([r.task, r.weight, r.trials, f"{r.best_s:.6g}", f"{r.predicted_s:.6g}", int(r.view)])


def format_tasks(result: TuneResult) -> str:
    """The per-task table (milliseconds) and the tuned sum, as ``cdmpp tune`` prints it."""
    lines = [f"{'task':44s} {'weight':>6s} {'trials':>6s} {'best ms':>10s} {'predicted ms':>12s}"]
    for r in result.tasks:
        if r.view:
            lines.append(f"{r.task[:44]:44s} {r.weight:6d} {r.trials:6d} {'view':>10s} {'view':>12s}")
            continue
        lines.append(f"{r.task[:44]:44s} {r.weight:6d} {r.trials:6d} {1e3 * r.best_s:10.4f} {1e3 * r.predicted_s:12.4f}")
    lines.append(f"tuned sum (task weight x best measured): {1e3 * result.tuned_sum_s:.3f} ms; "
                 f"{result.kept_trials} trials kept, {result.new_trials} new")
    if views := [r.task for r in result.tasks if r.view]:
        lines.append(f"run as views of their input (pure reshapes), not tuned and out of the sum: {', '.join(views)}")
    if result.default_schedule_tasks:
        lines.append(f"built from their default schedule (their fastest record did not compile; every trial kept): "
                     f"{', '.join(result.default_schedule_tasks)}")
    if result.unmeasured:
        named = ", ".join(f"{r.task} ({r.trials} trials, none succeeded)" if r.trials else f"{r.task} (not tuned)"
                          for r in result.unmeasured)
        lines.append(f"{len(result.unmeasured)} of {len(result.tasks)} tasks have no successful trial and are left "
                     f"out of the sum (the network runs them unscheduled): {named}")
    return "\n".join(lines)
