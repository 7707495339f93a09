"""PNG plots of evaluations (matplotlib, no display needed).

- :func:`plot_predicted_vs_measured`: predicted against measured latency, log-log,
  one panel per device, with the y = x line and the 2x band.
- :func:`plot_level_free`: the same with each task's level taken out (the within-task
  spread against the diagonal).
- :func:`plot_error_vs_shots`: an accuracy metric against the number of shots, one
  line per adaptation recipe (the leave-one-device-out table of ``cdmpp bench adapt-table``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from cdmpp.errors import InputError


def _pyplot():
    import matplotlib  # noqa: PLC0415  (keeps matplotlib off this module's import)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415  (keeps matplotlib off this module's import)

    return plt


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel_grid(n: int):
    """``(pyplot, figure, axes)``: a grid of ``n`` panels, three to a row.

    Raises:
        InputError: no panel.
    """
    if n == 0:
        raise InputError("nothing to plot: no panel")
    plt = _pyplot()
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4.0 * rows), squeeze=False)
    return plt, fig, axes


def plot_predicted_vs_measured(panels: dict[str, tuple], title: str, path: Path) -> Path:
    """Scatter predicted against measured latency per panel and write a PNG.

    Args:
        panels: panel title (e.g. a device id) -> ``(predicted, measured)``, float64
            ``(N,)`` seconds each (a third member, each program's task, is ignored).
        title: the figure's title.
        path: the PNG to write (folders are created).

    Returns:
        ``path``.

    Raises:
        InputError: no panel, or a panel whose arrays differ in shape or hold a
            non-positive latency.
    """

    plt, fig, axes = _panel_grid(len(panels))
    for ax, (name, arrays) in zip(axes.flat, panels.items()):
        pred, true = np.asarray(arrays[0], np.float64), np.asarray(arrays[1], np.float64)
        if pred.shape != true.shape or np.any(pred <= 0) or np.any(true <= 0):
            raise InputError(f"panel {name!r}: predicted and measured must be positive arrays of one shape")
        lo, hi = min(pred.min(), true.min()) / 1.5, max(pred.max(), true.max()) * 1.5
        ax.scatter(true, pred, s=3, alpha=0.35, linewidths=0)
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.plot([lo, hi], [2 * lo, 2 * hi], "k:", lw=0.6)
        ax.plot([lo, hi], [lo / 2, hi / 2], "k:", lw=0.6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        within2 = float(np.mean(np.abs(np.log(pred / true)) <= math.log(2)))
        mape = float(np.mean(np.abs(pred - true) / true))
        ax.set_title(f"{name}\n{true.size} programs, MAPE {100 * mape:.0f}%, within 2x {100 * within2:.0f}%", fontsize=8)
        ax.set_xlabel("measured latency (s)")
        ax.set_ylabel("predicted latency (s)")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(plt, fig, path)


def level_free(pred: np.ndarray, true: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each program's log ratio to its task's median, measured and predicted.

    Args:
        pred, true: float64 ``(N,)`` predicted and measured latency (seconds, > 0).
        groups: int ``(N,)`` task of each program.

    Returns:
        ``(log(measured / task median measured), log(predicted / task median predicted))``,
        float64 ``(N,)`` each: the within-task spread with each task's level taken out.
    """
    lp, lt, groups = np.log(pred), np.log(true), np.asarray(groups)
    x, y = np.empty_like(lt), np.empty_like(lp)
    for g in np.unique(groups):
        sel = groups == g
        x[sel], y[sel] = lt[sel] - np.median(lt[sel]), lp[sel] - np.median(lp[sel])
    return x, y


def plot_level_free(panels: dict[str, tuple], title: str, path: Path) -> Path:
    """Scatter predicted against measured latency with each task's level taken out
    (:func:`level_free`), the diagonal drawn, per panel, and write a PNG.

    A model that places each task's level but not the spread within it draws a flat
    cloud (slope 0); one squeezed toward each task's middle, a cloud flatter than the
    diagonal.  Each panel's title gives the within-task slope
    (:func:`cdmpp.train.metrics.fast_end`).

    Args:
        panels: panel title -> ``(predicted, measured, task of each program)``, float64
            ``(N,)`` seconds and int ``(N,)``.
        title: the figure's title.
        path: the PNG to write.

    Raises:
        InputError: no panel, or a panel without tasks or with non-positive latencies.
    """
    from .metrics import fast_end  # noqa: PLC0415  (keeps scipy off this module's import)

    plt, fig, axes = _panel_grid(len(panels))
    for ax, (name, arrays) in zip(axes.flat, panels.items()):
        if len(arrays) < 3:
            raise InputError(f"panel {name!r}: the level-free plot needs each program's task")
        pred, true, groups = (np.asarray(a) for a in arrays[:3])
        if pred.shape != true.shape or np.any(pred <= 0) or np.any(true <= 0):
            raise InputError(f"panel {name!r}: predicted and measured must be positive arrays of one shape")
        x, y = level_free(pred.astype(np.float64), true.astype(np.float64), groups)
        lim = max(float(np.abs(x).max()), float(np.abs(y).max()), 0.1) * 1.05
        ax.scatter(x, y, s=3, alpha=0.35, linewidths=0)
        ax.plot([-lim, lim], [-lim, lim], "k-", lw=0.8)
        ax.axhline(0, color="k", lw=0.4)
        ax.axvline(0, color="k", lw=0.4)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        fe = fast_end(pred, true, groups)
        ax.set_title(f"{name}\n{true.size} programs, {fe['tasks']} tasks, slope {fe['slope']:.2f}, "
                     f"fast 1/10 {fe['decile_log_ratio']:+.2f}", fontsize=8)
        ax.set_xlabel("log(measured / task median)")
        ax.set_ylabel("log(predicted / task median)")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(plt, fig, path)


def level_free_path(plot: Path) -> Path:
    """Where the level-free plot of ``plot`` goes: ``<stem>-level-free.png`` beside it."""
    return plot.with_name(f"{plot.stem}-level-free.png")


def plot_error_vs_shots(rows: dict[str, dict], title: str, path: Path, metric: str = "mape") -> Path:
    """Plot a metric of ``cdmpp bench adapt-table``'s rows against the number of shots and write a PNG.

    Rows named ``"<k> <selection> shots, <recipe>"`` become one line per (selection,
    recipe); rows named ``"zero-shot, ..."`` become horizontal lines.

    Args:
        rows: metric rows by name (:func:`cdmpp.train.adapt.adapt_table`).
        metric: the row key to plot (``"mape"`` is shown in percent).

    Returns:
        ``path``.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    lines: dict[str, list[tuple[int, float]]] = {}
    scale = 100.0 if metric in ("mape", "within_10", "within_25") else 1.0
    for name, r in rows.items():
        m = re.match(r"(\d+) (\w+) shots, (.+)", name)
        if m:
            lines.setdefault(f"{m.group(2)}, {m.group(3)}", []).append((int(m.group(1)), scale * r[metric]))
    for label, pts in sorted(lines.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for name, r in rows.items():
        if name.startswith("zero-shot"):
            ax.axhline(scale * r[metric], ls="--", lw=0.8, color="gray")
            ax.text(ax.get_xlim()[0], scale * r[metric], " " + name, fontsize=7, va="bottom", color="gray")
    ax.set_xlabel("shots (programs measured on the new device)")
    ax.set_ylabel(f"{metric} (%)" if scale == 100.0 else metric)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_tuning_curves(
    curves: dict[str, dict[str, dict[int, np.ndarray]]],
    title: str,
    path: Path,
    ylabel: str = "best latency",
    yardstick: str = "xgb",
    log_trials: bool = False,
) -> Path:
    """Best measured latency against trials, one panel per task, one line per cost model
    (the mean over seeds, with the band from the best to the worst seed), normalised by
    the mean final best of ``yardstick`` when the panel has it.

    Args:
        curves: panel title -> cost model -> seed -> float64 ``(T,)`` best-so-far curve
            (seconds).
        ylabel: what the curves measure (the axis says whether it is normalised).
        yardstick: the cost model whose final best is 1 (e.g. ``"xgb 512"``,
            :func:`benchmarks.tune.with_reference`).
        log_trials: a log-scale trial axis (for budgets of very different sizes).
    """
    plt = _pyplot()
    n = len(curves)
    cols = min(3, max(n, 1))
    rows = math.ceil(n / cols) if n else 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (panel, models) in zip(axes.flat, curves.items()):
        ref = None
        if models.get(yardstick):
            ref = float(np.mean([c[-1] for c in models[yardstick].values() if c.size]))  # NaN entries (not drawn) only lead
        for model, runs in sorted(models.items()):
            runs = [c for c in runs.values() if c.size]
            if not runs:
                continue
            t = min(c.size for c in runs)
            arr = np.stack([c[:t] for c in runs]) / (ref or 1.0)
            x = np.arange(1, t + 1)
            (line,) = ax.plot(x, arr.mean(0), label=f"{model} ({len(runs)} seed{'s' if len(runs) > 1 else ''})")
            if len(runs) > 1:
                ax.fill_between(x, arr.min(0), arr.max(0), color=line.get_color(), alpha=0.2)
        ax.set_title(panel, fontsize=8)
        ax.set_xlabel("measured trials")
        ax.set_ylabel(f"{ylabel} / {yardstick}'s final" if ref else f"{ylabel} (s)")
        ax.set_yscale("log")
        if log_trials:
            ax.set_xscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    return _save(plt, fig, path)
