"""``cdmpp bench selection-study``: what a tuner's choice of schedules does to the estimate
(the winner's curse), and a correction for it learned on other networks.

A tuner keeps each task's fastest measured schedule.  The plugin measures mostly the
schedules the model believes fast, so on the ones it keeps the model is more optimistic
than on another tuner's.  A task with one program in its design space (untunable,
:mod:`cdmpp.kernel_class`) is chosen by nobody and left alone.

Input: rows of ``cdmpp bench truth-check --retime --output`` (one per network and tuning
work dir), each with the cost model that tuned it (``--picked-by``).  For a row, the
**selection factor** is its tunable tasks' retimed sum over their estimated sum
(``sum(weight * retimed) / sum(weight * estimate)``; the recorded latency where a record
was not retimed).  A network's **corrected estimate** multiplies the estimate of its
tunable tasks, cold and warm, by the geometric mean of the factors of the *other*
networks tuned by the same cost model: leave one network out, so the correction never
reads the latencies of the records it corrects.
"""

from __future__ import annotations

import argparse
import math

from benchmarks import print_and_write_rows, read_truth_check_rows, render_table
from cdmpp.errors import InputError
from cdmpp.kernel_class import TUNABLE


def _reference(task: dict) -> float | None:
    """A task's measured latency for the factor: retimed where it was, else recorded."""
    ref = task.get("retimed_s") or task.get("measured_s")
    return float(ref) if ref and math.isfinite(ref) and ref > 0 else None


def tunable_sums(row: dict, key: str = "estimate_s") -> tuple[float, float]:
    """``(sum(weight * measured), sum(weight * estimate))`` over a truth-check row's
    tunable tasks with both (seconds; ``key``: ``"estimate_s"`` or ``"warm_estimate_s"``)."""
    meas = est = 0.0
    for t in row["per_task"]:
        ref, pred = _reference(t), t.get(key)
        if t.get("kernel_class") == TUNABLE and ref is not None and pred:
            meas += t["weight"] * ref
            est += t["weight"] * pred
    return meas, est


def selection_factor(row: dict) -> float | None:
    """A row's tunable tasks' measured sum over their estimated sum; ``None`` without any."""
    meas, est = tunable_sums(row)
    return meas / est if est > 0 else None


def corrected_total(row: dict, factor: float, key: str = "estimate_s") -> float | None:
    """The row's estimate (``key``) with its tunable tasks' part times ``factor``, seconds;
    ``None`` where the row has no such estimate."""
    if row.get(key) is None:
        return None
    tunable = sum(t["weight"] * t[key] for t in row["per_task"]
                  if t.get("kernel_class") == TUNABLE and t.get(key) is not None)
    return row[key] + (factor - 1.0) * tunable


def network_estimate(row: dict, cold_s: float | None, warm_s: float | None) -> float | None:
    """The in-network estimate as ``cdmpp estimate`` gives it: the warm total where the
    device's warm protocol is learned (else the cold one), plus the time between kernels."""
    kernels = warm_s if warm_s is not None else cold_s
    return None if kernels is None else kernels + (row.get("between_kernels_estimate_s") or 0.0)


def run_selection_study(rows: list[dict], picked_by: list[str]) -> list[dict]:
    """Each row's estimate before and after the leave-one-network-out correction.

    Args:
        rows: truth-check rows (``per_task`` with ``kernel_class``).
        picked_by: the cost model that tuned each row's work dir, in order.

    Returns:
        One dict per row: ``network``, ``picked_by``, ``own_factor`` (not used for the
        row), ``factor`` and ``factor_from`` (the other networks' factors, geometric
        mean, and their count; 1.0 and 0 where there is none), ``measured_e2e_s``,
        ``retimed_sum_s``, ``estimate_s``, ``corrected_s``, ``network_estimate_s``,
        ``corrected_network_s`` (seconds).

    Raises:
        InputError: a ``picked_by`` per row is missing, or a row lacks per-task kernel classes.
    """
    if len(picked_by) != len(rows):
        raise InputError(f"{len(rows)} truth-check rows but {len(picked_by)} --picked-by names; give one per row")
    for r in rows:
        if not all("kernel_class" in t for t in r.get("per_task", [])):
            raise InputError(f"row {r.get('network')}: no kernel class per task (truth-check rows of an older cdmpp)")
    factors = [selection_factor(r) for r in rows]
    out = []
    for i, (r, tuner) in enumerate(zip(rows, picked_by)):
        others = [math.log(f) for j, f in enumerate(factors)
                  if j != i and f is not None and picked_by[j] == tuner and rows[j]["network"] != r["network"]]
        factor = math.exp(sum(others) / len(others)) if others else 1.0
        cold, warm = corrected_total(r, factor), corrected_total(r, factor, "warm_estimate_s")
        out.append({
            "network": r["network"], "picked_by": tuner, "own_factor": factors[i], "factor": factor,
            "factor_from": len(others), "measured_e2e_s": r["measured_e2e_s"], "retimed_sum_s": r.get("retimed_sum_s"),
            "measured_sum_s": r.get("measured_sum_s"), "estimate_s": r["estimate_s"], "corrected_s": cold,
            "network_estimate_s": network_estimate(r, r["estimate_s"], r.get("warm_estimate_s")),
            "corrected_network_s": network_estimate(r, cold, warm),
        })
    return out


def format_selection_study(rows: list[dict], markdown: bool = False) -> str:
    """The study as a table: ratios to the network's end-to-end latency and to its retimed
    kernel sum, before and after the correction, then the mean |log ratio| per tuner."""

    def ratio(num, den):
        return f"{num / den:.2f}" if num is not None and den else "-"

    head = ["network", "picked by", "own factor", "factor (others)", "estimate / e2e", "corrected / e2e",
            "network estimate / e2e", "corrected network / e2e", "estimate / retimed sum", "corrected / retimed sum"]
    body = [[r["network"], r["picked_by"], "-" if r["own_factor"] is None else f"{r['own_factor']:.2f}",
             f"{r['factor']:.2f} ({r['factor_from']})", ratio(r["estimate_s"], r["measured_e2e_s"]),
             ratio(r["corrected_s"], r["measured_e2e_s"]), ratio(r["network_estimate_s"], r["measured_e2e_s"]),
             ratio(r["corrected_network_s"], r["measured_e2e_s"]), ratio(r["estimate_s"], r["retimed_sum_s"]),
             ratio(r["corrected_s"], r["retimed_sum_s"])] for r in rows]
    summary_head = ["picked by", "networks", "mean |log network estimate / e2e|", "corrected",
                    "within 0.9-1.1 of e2e", "corrected"]
    summary = []
    for tuner in dict.fromkeys(r["picked_by"] for r in rows):
        mine = [r for r in rows if r["picked_by"] == tuner and r["network_estimate_s"]]

        def err(key, mine=mine):
            return sum(abs(math.log(r[key] / r["measured_e2e_s"])) for r in mine) / len(mine)

        def within(key, mine=mine):
            return sum(0.9 <= r[key] / r["measured_e2e_s"] <= 1.1 for r in mine)

        summary.append([tuner, str(len(mine)), f"{err('network_estimate_s'):.3f}", f"{err('corrected_network_s'):.3f}",
                        f"{within('network_estimate_s')} of {len(mine)}", f"{within('corrected_network_s')} of {len(mine)}"])
    return render_table(head, body, markdown) + "\n\n" + render_table(summary_head, summary, markdown, left=1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench selection-study``'s arguments."""
    parser.add_argument("rows", nargs="+", help="truth-check JSON files (cdmpp bench truth-check --retime --output)")
    parser.add_argument("--picked-by", nargs="+", required=True,
                        help="the cost model that tuned each row's work dir (cdmpp, xgb, ...), in the order of the rows")
    parser.add_argument("--output", default=None, help="also write the rows as JSON here (the table beside it, .md)")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench selection-study``."""
    rows = read_truth_check_rows(args.rows)
    out = run_selection_study(rows, list(args.picked_by))
    print_and_write_rows(out, format_selection_study(out, markdown=True), args.output)
    return 0
