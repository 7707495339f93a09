"""Accuracy metrics of latency predictions (all latencies in seconds)."""

from __future__ import annotations

import numpy as np

from cdmpp.errors import InputError


def mape(pred: np.ndarray, true: np.ndarray) -> float:
    """Mean absolute percentage error, as a fraction (0.14 = 14%)."""
    return float(np.mean(np.abs(pred - true) / true))


def within(pred: np.ndarray, true: np.ndarray, tol: float) -> float:
    """Fraction of programs whose relative error is at most ``tol`` (e.g. 0.10)."""
    return float(np.mean(np.abs(pred - true) / true <= tol))


def rmse_log(pred: np.ndarray, true: np.ndarray) -> float:
    """Root-mean-square error of the natural log of latency."""
    return float(np.sqrt(np.mean((np.log(pred) - np.log(true)) ** 2)))


def mean_kendall_tau(pred: np.ndarray, true: np.ndarray, groups: np.ndarray) -> float:
    """Mean Kendall tau (tau-b) between predicted and measured latency within each task.

    Tasks (``groups``) with fewer than 2 programs or constant measured latencies are
    skipped (no order to get right).  A task whose predictions are all equal ranks
    nothing and counts as 0 (scipy gives NaN there; skipping it would reward a model
    that cannot tell the task's programs apart).  NaN when no task is left.
    """
    from scipy.stats import kendalltau  # noqa: PLC0415  (keeps scipy off this module's import)

    taus = []
    for g in np.unique(groups):
        sel = groups == g
        if sel.sum() < 2 or np.all(true[sel] == true[sel][0]):
            continue
        if np.all(pred[sel] == pred[sel][0]):
            taus.append(0.0)
            continue
        tau = kendalltau(pred[sel], true[sel]).statistic
        if np.isfinite(tau):
            taus.append(tau)
    return float(np.mean(taus)) if taus else float("nan")


def pairwise_accuracy(pred: np.ndarray, true: np.ndarray, groups: np.ndarray) -> float:
    """Fraction of same-task program pairs that the prediction orders like the measurement.

    Pairs with equal measured latencies are left out; a tie in the prediction counts
    as half right.  Pooled over all tasks' pairs (tasks with more programs weigh
    more), the "pairwise comparison accuracy" of TenSet (NeurIPS 2021, section 5.1)
    and Pruner.  NaN when there is no pair.
    """
    right = total = 0.0
    for g in np.unique(groups):
        sel = np.flatnonzero(groups == g)
        if sel.size < 2:
            continue
        dt = np.sign(true[sel][:, None] - true[sel][None, :])
        dp = np.sign(pred[sel][:, None] - pred[sel][None, :])
        upper = np.triu(np.ones_like(dt, dtype=bool), k=1) & (dt != 0)
        total += upper.sum()
        right += (dp[upper] == dt[upper]).sum() + 0.5 * (dp[upper] == 0).sum()
    return float(right / total) if total else float("nan")


def top_k_score(pred: np.ndarray, true: np.ndarray, groups: np.ndarray, weights: dict | None, k: int) -> float:
    """TenSet's top-k score (Zheng et al., NeurIPS 2021, section 5.1).

    Per task, the best measured latency among the ``k`` programs predicted fastest is
    compared with the best measured latency of all; the score is
    ``sum_t w_t * best_t / sum_t w_t * best_of_top_k_t`` (1.0 is perfect), with task
    weights ``weights[group]`` (default 1).
    """
    num = den = 0.0
    for g in np.unique(groups):
        sel = np.flatnonzero(groups == g)
        w = float((weights or {}).get(int(g), 1.0))
        top = sel[np.argsort(pred[sel], kind="stable")[:k]]
        num += w * true[sel].min()
        den += w * true[top].min()
    return float(num / den) if den > 0 else float("nan")


def _task_members(groups: np.ndarray) -> list[np.ndarray]:
    """Indices of each task's programs, tasks in sorted order."""
    order = np.argsort(groups, kind="stable")
    cuts = np.flatnonzero(np.diff(groups[order])) + 1
    return np.split(order, cuts)


def task_levels(pred: np.ndarray, true: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    """Each task's level, split by kernel class as the scored data shows it: tasks with one
    program (the untunable ones, whose design space holds one program: a collection
    measures every program it finds, so such a task has one) against tasks with several
    (tunable).  A task's level is the mean natural-log ratio predicted / measured over its
    programs; the class figures are over tasks, each task weighted 1.

    Args:
        pred, true: float64 ``(N,)`` predicted and measured latency (seconds, > 0).
        groups: int ``(N,)`` task of each program.

    Returns:
        ``untunable_tasks`` (tasks with one program), ``untunable_level`` (their mean level),
        ``untunable_within`` (the share of them whose level is within 1.25x either way),
        ``tunable_level`` and ``tunable_within`` (the same over tasks with several
        programs); NaN where a class has no task.
    """
    lr = np.log(np.asarray(pred, np.float64)) - np.log(np.asarray(true, np.float64))
    one, many = [], []
    for sel in _task_members(np.asarray(groups)):
        (one if sel.size == 1 else many).append(float(np.mean(lr[sel])))
    nan, bound = float("nan"), float(np.log(1.25))

    def within(levels: list[float]) -> float:
        return float(np.mean(np.abs(levels) <= bound)) if levels else nan

    return {
        "untunable_tasks": len(one),
        "untunable_level": float(np.mean(one)) if one else nan,
        "untunable_within": within(one),
        "tunable_level": float(np.mean(many)) if many else nan,
        "tunable_within": within(many),
    }


def fast_end(pred: np.ndarray, true: np.ndarray, groups: np.ndarray) -> dict[str, float]:
    """How well a task's fastest schedules are predicted; tasks with fewer than 2 programs
    or constant measured latencies are skipped.

    Args:
        pred, true: float64 ``(N,)`` predicted and measured latency (seconds, > 0).
        groups: int ``(N,)`` task of each program.

    Returns:
        ``best_ratio``: median over tasks of predicted / measured latency of the task's
        fastest measured program (1.0 is unbiased; above 1, the fast end is predicted
        too slow).  ``decile_log_ratio``: median over tasks of the mean natural-log ratio
        predicted / measured over the task's fastest tenth of programs (at least one).
        ``slow_half_log_ratio``: the same over the task's slowest half.  A model squeezed
        toward each task's middle has the first above 0 and the second below 0.
        ``slope``: the within-task slope of log(predicted) on log(measured), pooled over
        tasks (each program's deviation from its task's mean counts once, so tasks weigh
        by programs and spread); for a calibrated predictor it is the share of the
        within-task variance it explains, 1 for a perfect one, 0 for one that only
        places each task's level.  ``best_speed``: mean over tasks of measured-best /
        measured latency of the program predicted fastest (TenSet's top-1 score, each
        task weighted 1).  ``top1_of_8``: the same among the task's 8 fastest measured
        programs only (how well the model picks among the schedules a tuner converges
        to).  ``tau_fast_half``: mean over tasks of the Kendall tau within the task's
        fastest half of programs (tasks with at least 4 programs).  ``tasks``: the tasks
        counted.  NaN when no task counts.
    """
    from scipy.stats import kendalltau  # noqa: PLC0415  (keeps scipy off this module's import)

    pred, true, groups = np.asarray(pred, np.float64), np.asarray(true, np.float64), np.asarray(groups)
    lp, lt = np.log(pred), np.log(true)
    best, decile, slow, speed, cov, var = [], [], [], [], 0.0, 0.0
    speed8, tau_half = [], []
    for sel in _task_members(groups):
        if sel.size < 2 or np.all(true[sel] == true[sel][0]):
            continue
        order = sel[np.argsort(true[sel], kind="stable")]
        best.append(pred[order[0]] / true[order[0]])
        top8 = order[:8]
        speed8.append(true[order[0]] / true[top8[np.argmin(pred[top8])]])
        half = order[: sel.size // 2]
        if half.size >= 2 and sel.size >= 4 and not np.all(true[half] == true[half][0]):
            tau = kendalltau(true[half], pred[half]).statistic
            if np.isfinite(tau):
                tau_half.append(float(tau))
        fast = order[: max(1, sel.size // 10)]
        decile.append(float(np.mean(lp[fast] - lt[fast])))
        slowest = order[sel.size // 2:]
        slow.append(float(np.mean(lp[slowest] - lt[slowest])))
        speed.append(true[order[0]] / true[sel[np.argmin(pred[sel])]])
        dt, dp = lt[sel] - lt[sel].mean(), lp[sel] - lp[sel].mean()
        cov += float(dt @ dp)
        var += float(dt @ dt)
    nan = float("nan")
    return {
        "tasks": len(best),
        "best_ratio": float(np.median(best)) if best else nan,
        "decile_log_ratio": float(np.median(decile)) if decile else nan,
        "slow_half_log_ratio": float(np.median(slow)) if slow else nan,
        "slope": cov / var if var > 0 else nan,
        "best_speed": float(np.mean(speed)) if speed else nan,
        "top1_of_8": float(np.mean(speed8)) if speed8 else nan,
        "tau_fast_half": float(np.mean(tau_half)) if tau_half else nan,
    }


def summary(pred: np.ndarray, true: np.ndarray, groups: np.ndarray, weights: dict | None = None) -> dict[str, float]:
    """The evaluation table row: MAPE, within 10%/25%, RMSE of log-latency, mean Kendall
    tau within tasks, TenSet's top-1 and top-5 scores weighted by ``weights``
    (task weight per group id; default 1), the pairwise accuracy within tasks, and
    the fraction of programs predicted more than 2x off (``off_2x``), the median
    absolute percentage error (``median_ape``), and the fast-end measures of
    :func:`fast_end` (``best_ratio``, ``decile_log_ratio``, ``slow_half_log_ratio``, ``slope``, ``best_speed``,
    ``top1_of_8``, ``tau_fast_half``) and each kernel class's task level of
    :func:`task_levels` (``untunable_tasks``, ``untunable_level``, ``untunable_within``,
    ``tunable_level``, ``tunable_within``).

    Raises:
        ValueError: shapes differ, no program, or a non-positive latency.
    """
    pred, true = np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)
    if pred.shape != true.shape or pred.ndim != 1 or pred.size == 0:
        raise InputError(f"need two equal 1-D non-empty arrays, got {pred.shape} and {true.shape}")
    if np.any(true <= 0) or np.any(pred <= 0):
        raise InputError("latencies must be positive")
    return {
        "programs": int(true.size),
        "mape": mape(pred, true),
        "within_10": within(pred, true, 0.10),
        "within_25": within(pred, true, 0.25),
        "rmse_log": rmse_log(pred, true),
        "kendall_tau": mean_kendall_tau(pred, true, np.asarray(groups)),
        "top1": top_k_score(pred, true, np.asarray(groups), weights, 1),
        "top5": top_k_score(pred, true, np.asarray(groups), weights, 5),
        "pairwise": pairwise_accuracy(pred, true, np.asarray(groups)),
        "off_2x": float(np.mean(np.abs(np.log(pred / true)) > np.log(2.0))),
        "median_ape": float(np.median(np.abs(pred - true) / true)),
        **{k: v for k, v in fast_end(pred, true, np.asarray(groups)).items() if k != "tasks"},
        **task_levels(pred, true, np.asarray(groups)),
    }
