"""The held-out tuning table: the plugin's short runs against XGBoost's long ones.

``cdmpp bench tune ... --reference DIR`` prints it under the reach table.  For each
task, the plugin's best latency after ``k`` trials (mean over its seeds) is divided by
XGBoost's best after ``K`` trials (mean over its seeds), for the pairs the benchmark's
goals name (32 / 256, 64 / 512, 128 / 512; and 64 / 256, 128 / 256 against a
256-trial reference).  Seeds are not paired: the plugin's
3 seeds and XGBoost's 2 are each averaged first.  The wall time per trial of both,
to the same trial count, is set beside it.  Every latency is a measured one: from the
runs' tuning records, or, with ``--retime``, each compared record built and timed again
in one run (:func:`retime_held_out`), for runs measured on different days.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import render_table
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.tvm_compat import Target

from .retime import best_record_lines, check_measured_here, records_at_lines, retime_records
from .tune import (
    CHECKPOINT_FILE,
    ONLINE_ABLATION,
    bench_runs,
    best_so_far,
    run_trials,
    seconds_to_trials,
    tuning_curves,
)

PAIRS = ((32, 256), (64, 512), (128, 512), (64, 256), (128, 256))
"""``(plugin trials, XGBoost trials)`` compared in :func:`held_out_table` (a column no task
reaches, e.g. 512 against a 256-trial reference, is left out)."""

Retimed = dict[tuple[str, str, int, int], float]
"""``{(task key, cost model, seed, trials): seconds}``: each run's best record after
``trials`` trials, timed again in one run (:func:`retime_held_out`)."""


def curve_rows(out_dirs: list[Path], every: int = 16) -> list[dict]:
    """Best-so-far and wall time of every run under ``out_dirs`` after every ``every`` trials.

    Returns:
        One row per run and trial count: ``task`` (``"<network> <task>"``), ``cost_model``,
        ``seed``, ``trials``, ``best_s`` (seconds; the best measured latency so far) and
        ``wall_s`` (seconds from the start of the run; ``None`` where not logged).
    """
    rows = []
    for out_dir in out_dirs:
        for task, model, seed, run in bench_runs(Path(out_dir)):
            curve = best_so_far(run_trials(run))
            for k in range(every, curve.size + 1, every):
                rows.append({"task": task, "cost_model": model, "seed": seed, "trials": k,
                             "best_s": float(curve[k - 1]), "wall_s": seconds_to_trials(run, k)})
    return rows


def _mean_best(runs: dict[int, np.ndarray], k: int, retimed: dict[tuple[int, int], float] | None = None) -> float | None:
    if retimed is not None:
        vals = [retimed[(seed, k)] for seed, c in runs.items() if c.size >= k and (seed, k) in retimed]
    else:
        vals = [c[k - 1] for c in runs.values() if c.size >= k and np.isfinite(c[k - 1])]
    return float(np.mean(vals)) if vals else None


def retime_held_out(
    out_dir: Path, reference: Path, plugins: Sequence[str] = ("cdmpp",), yardstick: str = "xgb",
    pairs: tuple[tuple[int, int], ...] = PAIRS, rounds: int = 1,
) -> tuple[Retimed, list[dict]]:
    """Each run's best record after the trial counts :func:`held_out_table` compares, built
    and timed again now, one after the other (:func:`benchmarks.retime.retime_records`):
    the plugin's runs and the reference's, measured in different runs, compared in one.
    The records are timed task by task, both cost models' together, so a change of the
    machine's speed during the run moves both sides of a task's ratio alike.

    Args:
        out_dir: a ``cdmpp bench tune`` output with the runs of ``plugins``.
        reference: one with ``yardstick``'s runs of the same tasks (may be ``out_dir``).
        rounds: how many times every record is timed, in whole rounds one after the
            other; a record's latency is the median of its rounds.  On a cloud VM one
            timing of a best record can differ from the next by 1.5x.

    Returns:
        ``(retimed, rows)``: :data:`Retimed` for :func:`held_out_table`, and one row per
        timed record: ``task``, ``cost_model``, ``seed``, ``trials``, ``recorded_s`` (its
        latency as its run measured it), ``retimed_s`` (now, the median over the rounds
        it ran in; ``None`` when it failed to build or run in every round), all seconds,
        and with ``rounds > 1`` each round's timing as ``round1_s`` ... (``None`` where
        it failed).

    Raises:
        InputError: either output was measured on another device than this one, or has
            no ``device.json`` (:func:`benchmarks.retime.check_measured_here`); ``rounds``
            is below 1.
    """
    if rounds < 1:
        raise InputError(f"rounds={rounds}: every record is timed at least once")
    device = local_cpu()
    for folder in {Path(out_dir).resolve(), Path(reference).resolve()}:
        check_measured_here(folder, device)
    want = {**{p: sorted({k for k, _ in pairs}) for p in plugins}, yardstick: sorted({k for _, k in pairs})}
    by_task: dict[str, dict] = {}
    rows = []
    tasks = {task for task, model, _, _ in bench_runs(Path(out_dir)) if model in plugins}
    for folder in dict.fromkeys([Path(out_dir), Path(reference)]):
        for task, model, seed, run in bench_runs(folder):
            if model not in want or task not in tasks:  # the reference's other tasks are not compared
                continue
            trials = run_trials(run)
            lines = best_record_lines(trials, want[model])
            recs = records_at_lines(run, set(lines.values()))
            curve = best_so_far(trials)
            for k, line in lines.items():
                by_task.setdefault(task, {})[(str(run), line)] = recs[line]
                rows.append({"task": task, "cost_model": model, "seed": seed, "trials": k,
                             "recorded_s": float(curve[k - 1]), "_key": (str(run), line)})
    records = {key: rec for task in sorted(by_task) for key, rec in by_task[task].items()}
    target = Target(device.target)
    per_round = [retime_records(records, target) for _ in range(rounds)]
    retimed: Retimed = {}
    for r in rows:
        key = r.pop("_key")
        times = [secs.get(key) for secs in per_round]
        ran = [t for t in times if t is not None]
        r["retimed_s"] = float(np.median(ran)) if ran else None
        if rounds > 1:
            r.update({f"round{i}_s": t for i, t in enumerate(times, 1)})
        if r["retimed_s"] is not None:
            retimed[(r["task"], r["cost_model"], r["seed"], r["trials"])] = r["retimed_s"]
    return retimed, rows


def held_out_table(
    out_dir: Path, reference: Path, plugin: str = "cdmpp", yardstick: str = "xgb",
    pairs: tuple[tuple[int, int], ...] = PAIRS, markdown: bool = True, retimed: Retimed | None = None,
) -> tuple[str, dict[str, float | None]]:
    """Per task: ``plugin`` after ``k`` trials over ``yardstick`` after ``K`` (each the
    mean over its seeds' best-so-far), for each ``(k, K)`` of ``pairs``; XGBoost's own
    ``k = 64`` over its ``K = 512``; and both cost models' wall seconds per trial to the
    plugin's last ``k`` (mean over runs).

    Args:
        out_dir: a ``cdmpp bench tune`` output with ``plugin``'s runs.
        reference: one with ``yardstick``'s runs of the same tasks (may be ``out_dir``).
        retimed: the ratios of ``pairs`` from these latencies (:func:`retime_held_out`)
            instead of the recorded ones; a pair without a retimed record is left out.

    Returns:
        ``(table, means)``: the table with a mean row over tasks; ``means`` maps each
        column name to its mean over tasks (``None`` where no task has both runs).
    """

    mine, ref = tuning_curves(Path(out_dir)), tuning_curves(Path(reference))
    runs_of = {name: list(bench_runs(Path(folder))) for name, folder in ((plugin, out_dir), (yardstick, reference))}
    walls_at = max(k for k, _ in pairs)
    cols = [f"{plugin} {k} / {yardstick} {K}" for k, K in pairs] + [f"{yardstick} 64 / {yardstick} 512",
                                                                    f"{plugin} s/trial", f"{yardstick} s/trial"]
    body, per_col = [], {c: [] for c in cols}
    for task, models in mine.items():
        runs, xgb = models.get(plugin, {}), ref.get(task, {}).get(yardstick, {})
        if not runs or not xgb:
            continue
        vals = []
        for k, K in pairs:
            a = _mean_best(runs, k, None if retimed is None else _of(retimed, task, plugin))
            b = _mean_best(xgb, K, None if retimed is None else _of(retimed, task, yardstick))
            vals.append(a / b if a is not None and b is not None else None)
        a, b = _mean_best(xgb, 64), _mean_best(xgb, 512)
        vals.append(a / b if a is not None and b is not None else None)
        for name in (plugin, yardstick):
            secs = [seconds_to_trials(run, walls_at) for t, m, _s, run in runs_of[name] if t == task and m == name]
            secs = [s / walls_at for s in secs if s is not None]
            vals.append(float(np.mean(secs)) if secs else None)
        for c, v in zip(cols, vals):
            if v is not None:
                per_col[c].append(v)
        body.append([task, f"{len(runs)} / {len(xgb)}", *("-" if v is None else f"{v:.2f}" for v in vals)])
    means = {c: (float(np.mean(v)) if v else None) for c, v in per_col.items()}
    body.append(["mean over tasks", "", *("-" if means[c] is None else f"{means[c]:.2f}" for c in cols)])
    head = ["task", f"seeds {plugin} / {yardstick}", *cols]
    keep = [0, 1] + [i + 2 for i, c in enumerate(cols) if means[c] is not None]  # columns no task reaches left out
    return render_table([head[i] for i in keep], [[row[i] for i in keep] for row in body], markdown), means


def _of(retimed: Retimed, task: str, model: str) -> dict[tuple[int, int], float]:
    return {(seed, k): v for (t, m, seed, k), v in retimed.items() if t == task and m == model}


def runs_checkpoint_line(out_dir: Path, given: str | None) -> str | None:
    """The checkpoint line of a tune-benchmark output: the :data:`CHECKPOINT_FILE` line of
    its plugin runs (one line per distinct checkpoint, when they differ).  Runs that record
    none (tuned before the file existed) are named with ``given``, the line of the
    checkpoint passed to this command, marked as such; ``None`` when the output has no
    plugin run and nothing is given."""
    lines: dict[str, None] = {}
    unrecorded = 0
    for _key, model, _seed, run in bench_runs(out_dir):
        if re.sub(r"-\d+trials$", "", model) not in ONLINE_ABLATION:
            continue
        f = run / CHECKPOINT_FILE
        if f.is_file():
            lines[f.read_text(encoding="utf-8").strip()] = None
        else:
            unrecorded += 1
    if unrecorded and given:
        lines[f"{given} (given to this summary: {unrecorded} of the plugin runs record no checkpoint)"] = None
    if not lines:
        return given
    return "\n".join(lines)
