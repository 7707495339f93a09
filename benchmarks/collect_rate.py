"""``cdmpp bench collect-rate``: programs measured per minute, side by side in one run.

Three ways to measure random and evolutionary samples of one network's tasks on this
CPU, each for the same wall-clock budget, one after the other on a quiet machine:

* ``plain TVM``: MetaSchedule's own pieces with the collector's timing protocol and
  nothing else: ``ReplayTrace`` samples of each task in turn, ``LocalBuilder`` on all
  cores, ``LocalRunner`` (random samples only, no de-duplication, no records kept);
* ``baseline collector``: ``cdmpp collect`` of an earlier git revision (a worktree
  of this repository, run with its own code);
* ``this collector``: ``cdmpp collect`` of the working tree.

Every run starts in a fresh process with a fresh dataset folder, so each pays for
importing TVM's tensor intrinsics and extracting the network's tasks; the rate is
measured programs / wall budget.  The noise of the two collectors' labels is reported
beside the rates: the coefficient of variation of each program's repeats, and the
run-to-run drift of a re-measured sample (``cdmpp remeasure``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import render_table
from cdmpp import dataset as ds
from cdmpp.collect import MeasureConfig, QuietConfig, extract_network_tasks, remeasure, stops_early
from cdmpp.collect.sampling import make_tune_context
from cdmpp.collect.store import DatasetStore, program_hash_key
from cdmpp.collect.timing import local_bench, measure_batch
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.records import read_records
from cdmpp.tvm_compat import (
    LocalBuilder,
    LocalRunner,
    Target,
    build_for_measurement,
    load_tensor_intrinsics,
    ms,
)

PATHS = {
    "plain": "plain TVM",
    "baseline": "baseline collector",
    "current": "this collector",
    "current-every-repeat": "this collector, every repeat",
    "current-random": "this collector, random samples only",
}
"""The benchmark's paths and the names of their rows."""


@dataclass
class CollectBenchmarkConfig:
    """What ``run_collect_benchmark`` compares.

    Attributes:
        network: the zoo network whose tasks are measured.
        minutes: wall-clock budget of each run, in minutes.
        baseline_rev: git revision of the baseline collector (``None``: skip it).
        programs_per_task: ``--programs-per-task`` of both collectors (and the plain
            path's samples per task).
        collect_args: further ``cdmpp collect`` options given to both collectors.
        remeasure: programs of each collector's run timed again for the drift.
        paths: which of ``"plain"``, ``"baseline"``, ``"current"``,
            ``"current-every-repeat"`` (this collector with ``--adaptive-repeats 0``:
            every program gets all 10 repeats, as on the other paths) and
            ``"current-random"`` (this collector with ``--evolutionary-fraction 0``: only
            ``ReplayTrace`` samples, the plain path's sampling) to run, in order.
    """

    network: str = "resnet_18-b1"
    minutes: float = 5.0
    baseline_rev: str | None = None
    programs_per_task: int = 32
    collect_args: list[str] = field(default_factory=list)
    remeasure: int = 40
    paths: tuple[str, ...] = ("plain", "baseline", "current")


def _plain_worker(network: str, out: str, seconds: float, per_task: int) -> None:
    """In a fresh process: ReplayTrace + LocalBuilder + LocalRunner until ``seconds`` pass;
    writes ``{"measured": n, "cv": [...]}`` to ``out``."""
    start = time.perf_counter()
    device = local_cpu()
    target = Target(device.target)
    m = MeasureConfig()
    load_tensor_intrinsics(target)
    tasks = extract_network_tasks(network, target)
    builder = LocalBuilder(max_workers=os.cpu_count(), timeout_sec=m.build_timeout_s, f_build=build_for_measurement)
    runner = LocalRunner(
        timeout_sec=m.run_timeout_s,
        evaluator_config=m.evaluator_config(),
    )
    measured, cvs = 0, []
    for t in tasks:
        if time.perf_counter() - start > seconds:
            break
        ctx = ms.TuneContext(t.mod, target=target, space_generator="post-order-apply",
                             search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=64),
                             task_name=t.name, rand_state=0, num_threads=device.cores)
        ctx.pre_tuning(max_trials=per_task, num_trials_per_iter=per_task, database=None, cost_model=None)
        cands = ctx.generate_measure_candidates() or []
        ctx.post_tuning()
        built = builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
        ok = [(c, b) for c, b in zip(cands, built) if not b.error_msg]
        futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", c.args_info) for c, b in ok])
        for f in futures:
            r = f.result()
            if time.perf_counter() - start > seconds:
                break
            if r.run_secs and not r.error_msg:
                measured += 1
                secs = np.asarray([float(x) for x in r.run_secs])
                cvs.append(float(secs.std() / secs.mean()))
        for _, b in ok:
            shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
    Path(out).write_text(json.dumps({"measured": measured, "cv": cvs}), encoding="utf-8")


def _run_collector(python_path: str | None, network: str, out_dir: Path, seconds: float, args: list[str]) -> None:
    """``cdmpp collect`` in a fresh process (``python_path``: that checkout's code), stopped with
    SIGINT after ``seconds`` (it finishes the batch in flight, as a user's Ctrl-C would)."""
    env = dict(os.environ)
    if python_path is not None:
        env["PYTHONPATH"] = python_path
    command = [sys.executable, "-c", "import sys; from cdmpp.cli import main; sys.exit(main())",
           "collect", "-n", network, "-o", str(out_dir), *args]
    log = open(out_dir.parent / f"{out_dir.name}.log", "w", encoding="utf-8")  # noqa: SIM115  closed below
    proc = subprocess.Popen(command, env=env, cwd=tempfile.gettempdir(), stdout=log, stderr=subprocess.STDOUT)
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    finally:
        log.close()


def _noise(device_dir: Path, sample: int) -> dict:
    """Repeat CV (median, p90) of a folder's programs and the drift of ``sample`` of them timed again."""

    db = ds.load_device_dir(device_dir)
    cv = np.asarray([p.run_secs.std() / p.run_secs.mean() for p in db.programs]) if db.programs else np.zeros(0)
    out = {"cv_median": float(np.median(cv)) if cv.size else float("nan"),
           "cv_p90": float(np.quantile(cv, 0.9)) if cv.size else float("nan")}
    if sample and db.programs:
        path = remeasure(device_dir, sample=sample, progress=False)
        drift = []
        for _, o in ds.iter_json_lines(path):
            if o["again"]:
                a, b = float(np.median(o["run_secs"])), float(np.median(o["again"]))
                drift.append(abs(b - a) / a)
        out["drift_median"] = float(np.median(drift)) if drift else float("nan")
        out["drift_p90"] = float(np.quantile(drift, 0.9)) if drift else float("nan")
        out["remeasured"] = len(drift)
    return out


def run_collect_benchmark(cfg: CollectBenchmarkConfig, work_dir: Path, repo: Path | None = None) -> list[dict]:
    """Run each path of ``cfg.paths`` for ``cfg.minutes`` and return one row per path.

    Returns:
        Rows with ``path``, ``measured`` (programs), ``minutes``, ``per_min``
        (programs per minute) and the noise figures ``cv_median``, ``cv_p90`` and, for
        the collectors, ``drift_median``, ``drift_p90`` (fractions) and their
        ``stage_seconds`` when the collector records them.

    Raises:
        ValueError: ``"baseline"`` asked for without ``baseline_rev``, or an unknown path.
    """
    bad = [p for p in cfg.paths if p not in PATHS]
    if bad or ("baseline" in cfg.paths and not cfg.baseline_rev):
        raise InputError("paths must be plain, baseline (with a baseline revision), current, "
                         f"current-every-repeat or current-random; got {cfg.paths}")
    repo = Path(repo or Path(__file__).resolve().parent.parent)
    work_dir = Path(work_dir).resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    seconds = 60.0 * cfg.minutes
    args = ["--programs-per-task", str(cfg.programs_per_task), *cfg.collect_args]
    rows = []
    for path in cfg.paths:
        out = work_dir / path
        shutil.rmtree(out, ignore_errors=True)
        t0 = time.perf_counter()
        if path == "plain":
            out.mkdir(parents=True)
            code = ("import sys; from benchmarks.collect_rate import _plain_worker; "
                    f"_plain_worker({cfg.network!r}, {str(out / 'plain.json')!r}, {seconds}, {cfg.programs_per_task})")
            subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=seconds + 300)
            res = json.loads((out / "plain.json").read_text(encoding="utf-8"))
            cv = np.asarray(res["cv"])
            row = {"path": PATHS["plain"], "measured": res["measured"],
                   "cv_median": float(np.median(cv)) if cv.size else float("nan"),
                   "cv_p90": float(np.quantile(cv, 0.9)) if cv.size else float("nan")}
        else:
            code_path = None
            if path == "baseline":
                code_path = str(work_dir / "baseline-src")
                shutil.rmtree(code_path, ignore_errors=True)
                subprocess.run(["git", "-C", str(repo), "worktree", "add", "-f", "--detach", code_path,
                                cfg.baseline_rev], check=True, capture_output=True)
            extra = {"current-every-repeat": ["--adaptive-repeats", "0"],
                     "current-random": ["--evolutionary-fraction", "0"]}.get(path, [])
            try:
                _run_collector(code_path, cfg.network, out, seconds, args + extra)
            finally:
                if code_path is not None:
                    subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", code_path],
                                   check=False, capture_output=True)
            (dev,) = ds.device_dirs(out)
            m = ds.read_manifest(dev)
            entry = m.get("collections", [{}])[-1]
            name = PATHS[path] + (f" ({cfg.baseline_rev})" if path == "baseline" else "")
            row = {"path": name, "measured": len(ds.load_device_dir(dev).programs)}
            row.update(_noise(dev, cfg.remeasure))
            if "stage_seconds" in entry:
                row["stage_seconds"] = entry["stage_seconds"]
        row["minutes"] = round((time.perf_counter() - t0) / 60.0, 2)
        row["per_min"] = row["measured"] / cfg.minutes
        rows.append(row)
    return rows


def format_collect_benchmark(rows: list[dict], markdown: bool = False) -> str:
    """The rows as a table: programs per minute, the ratio to each other path, and the noise."""

    def pct(r, k):
        v = r.get(k)
        return "-" if v is None or v != v else f"{100 * v:.1f}%"

    head = ["path", "programs", "programs/min", "repeat CV median", "repeat CV p90", "drift median", "drift p90"]
    body = [[r["path"], str(r["measured"]), f"{r['per_min']:.1f}", pct(r, "cv_median"), pct(r, "cv_p90"),
             pct(r, "drift_median"), pct(r, "drift_p90")] for r in rows]
    lines = [render_table(head, body, markdown)]
    ours = [r for r in rows if r["path"].startswith(PATHS["current"])]
    others = [r for r in rows if r not in ours and r["per_min"] > 0]
    for now in ours:
        for r in others:
            lines.append(f"{now['path']} / {r['path']}: {now['per_min'] / r['per_min']:.2f}x")
    return "\n".join(lines)


@dataclass
class SearchCheckConfig:
    """What ``run_search_check`` compares: the collector's evolutionary phase at several
    population sizes, on tasks that already have measured programs in a dataset.

    Attributes:
        dataset: dataset folder holding this CPU's device folder (the search learns from
            its programs, as the collector's evolutionary phase does; nothing is written).
        networks: zoo networks whose largest tasks (task weight x FLOPs) are searched.
        tasks_per_network: tasks taken from each network.
        populations: ``EvolutionarySearch`` population sizes compared.
        batch: candidates drawn by one search call (the collector's ``batch_size``).
        seed: the search's random seed.
    """

    dataset: Path
    networks: list[str] = field(default_factory=lambda: ["resnet_50-b1", "mobilenet_v2-b1", "bert_base-b1s128"])
    tasks_per_network: int = 2
    populations: tuple[int, ...] = (128, 64, 32)
    batch: int = 32
    seed: int = 0


def run_search_check(cfg: SearchCheckConfig) -> list[dict]:
    """Draw one batch per task and population with the collector's evolutionary search and
    time every program (the collector's protocol, quiet-machine guard on).

    Each search's cost model is an XGBoost trained on every program of the task already
    in ``cfg.dataset`` (as in ``cdmpp collect``).  A smaller population costs less search
    time; the check shows whether its programs stay as fast.

    Returns:
        One row per (task, population): ``network``, ``task``, ``population``,
        ``search_s`` (seconds of one search call), ``measured``, ``median_s`` and
        ``best_s`` (median and fastest label of the batch, seconds), ``known_best_s`` (the
        fastest label already in the dataset, seconds).

    Raises:
        InputError: this CPU has no device folder in ``cfg.dataset``, or none of its
            tasks has measured programs.
    """
    device = local_cpu()
    device_dir = Path(cfg.dataset) / device.device_id
    if not (device_dir / ds.MANIFEST_FILE).exists():
        raise InputError(f"{device_dir}: no device folder of this CPU ({device.device_id}) to learn from")
    target = Target(device.target)
    load_tensor_intrinsics(target)
    store = DatasetStore(device_dir)
    chosen = []
    for network in cfg.networks:
        tasks = []
        for t in extract_network_tasks(network, target):
            if not store.db.has_workload(t.mod):  # never measured here (and nothing is written)
                continue
            wl, t.workload_key = store.workload(t.mod)
            t.mod = wl.mod
            if store.done.get(t.workload_key, 0) >= 8:
                tasks.append((t, wl))
        tasks.sort(key=lambda tw: -tw[0].weight * tw[0].flops)
        chosen += tasks[: cfg.tasks_per_network]
    if not chosen:
        raise InputError(f"{device_dir}: none of the networks' tasks has measured programs")
    bench = local_bench(MeasureConfig(), target, "cpu", QuietConfig())
    rows = []
    try:
        for task, wl in chosen:
            known = min(float(np.median([float(x) for x in r.run_secs])) for r in store.db.get_top_k(wl, 1 << 30))
            for pop in cfg.populations:
                ctx, cost_model = make_tune_context(task, target, device, "evolutionary", cfg.seed, store, wl, pop)
                ctx.pre_tuning(max_trials=cfg.batch * 4, num_trials_per_iter=cfg.batch, database=store.db,
                               cost_model=cost_model)
                t0 = time.perf_counter()
                cands = ctx.generate_measure_candidates() or []
                search_s = time.perf_counter() - t0
                ctx.post_tuning()
                out = measure_batch(bench, [(c, program_hash_key(c.sch.mod)) for c in cands])
                labels = [float(np.median(secs)) for _, _, secs, _, _ in out if secs]
                rows.append({
                    "network": task.network, "task": task.name, "population": pop, "search_s": search_s,
                    "measured": len(labels), "median_s": float(np.median(labels)) if labels else float("nan"),
                    "best_s": min(labels) if labels else float("nan"), "known_best_s": known,
                })
    finally:
        bench.close()
    return rows


def format_search_check(rows: list[dict], markdown: bool = False) -> str:
    """Per population: search seconds per call and, against the first population, the
    geometric mean over tasks of the batch's median and fastest label."""

    pops = list(dict.fromkeys(r["population"] for r in rows))
    by = {(r["network"], r["task"], r["population"]): r for r in rows}
    tasks = list(dict.fromkeys((r["network"], r["task"]) for r in rows))
    head = ["population", "search s per call", "median label / first's (geo-mean)", "best label / first's (geo-mean)",
            "batch best / known best (geo-mean)"]
    body = []
    for p in pops:
        ok = [t for t in tasks if by[(*t, p)]["measured"] and by[(*t, pops[0])]["measured"]]

        def gm(f, ok=ok):
            return float(np.exp(np.mean([np.log(f(t)) for t in ok]))) if ok else float("nan")

        body.append([str(p), f"{np.mean([by[(*t, p)]['search_s'] for t in tasks]):.2f}",
                     f"{gm(lambda t: by[(*t, p)]['median_s'] / by[(*t, pops[0])]['median_s']):.3f}",
                     f"{gm(lambda t: by[(*t, p)]['best_s'] / by[(*t, pops[0])]['best_s']):.3f}",
                     f"{gm(lambda t: by[(*t, p)]['best_s'] / by[(*t, p)]['known_best_s']):.3f}"])
    return render_table(head, body, markdown)


@dataclass
class AdaptiveRepeatCheck:
    """What :func:`check_adaptive_repeats` finds for one rule on one device folder.

    Attributes:
        programs: programs with all ``repeat`` repeats stored (the others are skipped).
        stopped: fraction of them the rule would stop after the first repeats.
        timing_saved: fraction of the kernels' own run time (sum of every repeat) the
            rule would save, counting the extra warm-up run of a resumed program.
        change_median, change_p90, change_p99, change_max: relative change of the label
            (median of the kept repeats against the median of all of them), over the
            stopped programs.
    """

    programs: int
    stopped: float
    timing_saved: float
    change_median: float
    change_p90: float
    change_p99: float
    change_max: float


def check_adaptive_repeats(device_dir: Path, first: int = 3, min_s: float = 0.002, max_spread: float = 0.02,
                           repeat: int = 10) -> AdaptiveRepeatCheck:
    """Replay the adaptive-repeat rule (:class:`cdmpp.collect.MeasureConfig`) on a folder's
    stored repeats: every tuning record keeps all its repeats, in the order they were
    timed, so the rule's label can be compared with the full protocol's on the same runs.

    A program stops after its first ``first`` repeats when their median is at least
    ``min_s`` seconds and their spread (max - min) / median is at most ``max_spread``.

    Args:
        device_dir: a device folder (``database_tuning_record.json`` or its ``.gz``).
        first, min_s, max_spread: the rule (repeats, seconds, fraction).
        repeat: the full protocol's repeats; records with another count are skipped.

    Returns:
        :class:`AdaptiveRepeatCheck`.

    Raises:
        cdmpp.errors.InputError: the folder has no tuning records with ``repeat`` repeats.
    """
    path = ds.resolve(Path(device_dir) / ds.RECORD_FILE)
    secs = [] if path is None else [r.run_secs for r in read_records(path, measured=True) if len(r.run_secs) == repeat]
    if not secs:
        raise InputError(f"{device_dir}: no tuning records with {repeat} repeats to check the rule on")

    a = np.asarray(secs, dtype=np.float64)
    stop = np.asarray([stops_early(list(row[:first]), min_s, max_spread) for row in a], dtype=bool)
    full = np.median(a, axis=1)
    change = np.abs(np.median(a[:, :first], axis=1) - full) / full
    # a resumed program runs the kernel once more untimed (the time evaluator's warm-up)
    saved = a[stop, first:].sum() - full[~stop].sum()
    c = change[stop] if stop.any() else np.zeros(1)
    return AdaptiveRepeatCheck(len(a), float(stop.mean()), float(saved / a.sum()), float(np.median(c)),
                               float(np.quantile(c, 0.9)), float(np.quantile(c, 0.99)), float(c.max()))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench collect-rate``'s arguments."""
    parser.add_argument("-n", "--network", default="resnet_18-b1")
    parser.add_argument("--minutes", type=float, default=5.0, help="wall-clock budget of each run")
    parser.add_argument("--baseline-rev", default=None, help="git revision of the collector to compare with")
    parser.add_argument("--programs-per-task", type=int, default=32)
    parser.add_argument("--remeasure", type=int, default=40, help="programs of each collector's run timed again (drift)")
    parser.add_argument("--paths", nargs="+", default=["plain", "baseline", "current"],
                        choices=["plain", "baseline", "current", "current-every-repeat", "current-random"])
    parser.add_argument("--output", default="runs/collect-benchmark", help="the runs' dataset folders and the table")


def _run_collect_benchmark(args) -> int:

    paths = tuple(p for p in args.paths if p != "baseline" or args.baseline_rev)
    cfg = CollectBenchmarkConfig(network=args.network, minutes=args.minutes, baseline_rev=args.baseline_rev,
                                 programs_per_task=args.programs_per_task, remeasure=args.remeasure, paths=paths)
    rows = run_collect_benchmark(cfg, Path(args.output))
    table = format_collect_benchmark(rows)
    print(table)
    out = Path(args.output)
    (out / "collect_benchmark.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    (out / "collect_benchmark.md").write_text(format_collect_benchmark(rows, markdown=True) + "\n", encoding="utf-8")
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench collect-rate``."""
    return _run_collect_benchmark(args)
