"""The held-out tuning table: the plugin's short runs against XGBoost's long ones.

``cdmpp bench tune ... --reference DIR`` prints it under the reach table.  For each
task, the plugin's best latency after ``k`` trials (mean over its seeds) is divided by
XGBoost's best after ``K`` trials (mean over its seeds), for the pairs the benchmark's
goals name (32 / 256, 64 / 512, 128 / 512).  Seeds are not paired: the plugin's
3 seeds and XGBoost's 2 are each averaged first.  The wall time per trial of both,
to the same trial count, is set beside it.  Every latency is a measured one from the
runs' tuning records.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks import render_table

from .tune import bench_runs, best_so_far, run_trials, seconds_to_trials, tuning_curves

PAIRS = ((32, 256), (64, 512), (128, 512))
"""``(plugin trials, XGBoost trials)`` compared in :func:`heldout_table`."""


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


def _mean_best(runs: dict[int, np.ndarray], k: int) -> float | None:
    vals = [c[k - 1] for c in runs.values() if c.size >= k and np.isfinite(c[k - 1])]
    return float(np.mean(vals)) if vals else None


def heldout_table(
    out_dir: Path, reference: Path, plugin: str = "cdmpp", yardstick: str = "xgb",
    pairs: tuple[tuple[int, int], ...] = PAIRS, markdown: bool = True,
) -> tuple[str, dict[str, float | None]]:
    """Per task: ``plugin`` after ``k`` trials over ``yardstick`` after ``K`` (each the
    mean over its seeds' best-so-far), for each ``(k, K)`` of ``pairs``; XGBoost's own
    ``k = 64`` over its ``K = 512``; and both cost models' wall seconds per trial to the
    plugin's last ``k`` (mean over runs).

    Args:
        out_dir: a ``cdmpp bench tune`` output with ``plugin``'s runs.
        reference: one with ``yardstick``'s runs of the same tasks (may be ``out_dir``).

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
            a, b = _mean_best(runs, k), _mean_best(xgb, K)
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
    return render_table(head, body, markdown), means

