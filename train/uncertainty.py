"""Prediction intervals: MC dropout, calibrated on workloads the model did not train on.

A point prediction ``m`` (natural log of seconds, dropout off) comes with ``s``, the
standard deviation of ``passes`` forward passes with dropout on (MC dropout; Gal and
Ghahramani, ICML 2016).  MC dropout alone measures only the model's own spread, which
is far narrower than its error on a new network, so the interval is calibrated the way
normalised split-conformal prediction does (Papadopoulos et al., 2008; Lei et al.,
JASA 2018, section 5.2): on calibration programs (the checkpoint's validation
workloads, never a test network) the normalised residuals ``r = (y - m) / s**alpha``
give their ``lower`` and ``upper`` quantiles ``q_lo`` and ``q_hi``, and a new program's
interval is ``exp(m + q_lo * s**alpha)`` to ``exp(m + q_hi * s**alpha)`` seconds.
``alpha`` (from ``ALPHAS``) is the one whose coverage differs least between the thirds
of the calibration programs ordered by ``s``: the error grows with ``s``, but more
slowly than in proportion.

Two other methods are computed for comparison (:func:`interval_methods`):
``"mc-raw"`` takes the 10th and 90th percentile of the passes themselves (no
calibration) and ``"constant"`` the quantiles of the plain residuals ``y - m`` (one width
for every program).  The checkpoint stores the calibration under its metadata's
``"interval"`` key (:func:`calibrate_checkpoint`).  Torch only: no Lightning.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from cdmpp.checkpoint import CONFIG_FILE, checkpoint_meta, load_checkpoint
from cdmpp.errors import CheckpointError, InputError
from cdmpp.intervals import (  # noqa: F401  (the inference half of the intervals, re-exported for the calibration)
    ALPHAS,
    METHODS,
    MIN_STD,
    IntervalConfig,
    interval,
    interval_methods,
    mc_log_latency,
    mc_std,
)
from cdmpp.train.device_scores import own_split_corpus

from .devices import dataset_label
from .report import CARD_FILE, adapted_sections, model_card


def calibrate(point: np.ndarray, passes: np.ndarray, true_s: np.ndarray, cfg: IntervalConfig) -> dict:
    """Calibration of every method on programs with measured latencies ``true_s`` (seconds, ``(K,)``).

    Returns:
        A JSON-able dict: ``passes``, ``lower``, ``upper``, ``programs`` and, per
        method, its residual quantiles (``mc-normalized``: ``q_lower``/``q_upper`` of
        ``(y - m) / s``; ``constant``: of ``y - m``; ``mc-raw`` needs none).

    Raises:
        ValueError: no program, or shapes that differ.
    """
    y = np.log(np.asarray(true_s, dtype=np.float64))
    if y.size == 0 or point.shape != y.shape or passes.shape[1] != y.size:
        raise InputError(f"need matching non-empty arrays, got {point.shape}, {passes.shape} and {y.shape}")
    s = mc_std(passes)
    r = y - point
    q = (cfg.lower, cfg.upper)
    thirds = np.array_split(np.argsort(s, kind="stable"), 3)

    def spread(alpha: float) -> float:
        lo, hi = np.quantile(r / s**alpha, q)
        inside = (r >= lo * s**alpha) & (r <= hi * s**alpha)
        cov = [float(np.mean(inside[t])) for t in thirds if t.size]
        return max(cov) - min(cov)

    alpha = min(ALPHAS, key=spread)
    return {
        "passes": cfg.passes,
        "lower": cfg.lower,
        "upper": cfg.upper,
        "programs": int(y.size),
        "mc-normalized": {
            **dict(zip(("q_lower", "q_upper"), map(float, np.quantile(r / s**alpha, q)))),
            "alpha": float(alpha),
            "coverage_spread_by_alpha": {str(a): round(spread(a), 4) for a in ALPHAS},
        },
        "constant": dict(zip(("q_lower", "q_upper"), map(float, np.quantile(r, q)))),
    }


def coverage_row(low: np.ndarray, high: np.ndarray, true_s: np.ndarray, point_s: np.ndarray) -> dict:
    """Coverage (fraction of measured latencies inside ``[low, high]``), the fraction
    below and above, and the median width as the ratio ``high / low``."""
    t = np.asarray(true_s, dtype=np.float64)
    return {
        "programs": int(t.size),
        "coverage": float(np.mean((t >= low) & (t <= high))),
        "below": float(np.mean(t < low)),
        "above": float(np.mean(t > high)),
        "median_width_ratio": float(np.median(high / low)),
        "point_inside": float(np.mean((point_s >= low) & (point_s <= high))),
    }


def calibrate_checkpoint(
    checkpoint: Path, root: Path | Sequence[Path], cache_dir: Path | None, cfg: IntervalConfig | None = None,
    method: str = "mc-normalized", progress: bool = True, write: bool = True,
) -> dict[str, tuple[dict, dict[str, dict[str, dict]]]]:
    """Calibrate a device-table checkpoint's intervals on its validation workloads and
    score every method's coverage on its held-out network (when it has one).

    The validation workloads are the checkpoint's own split, drawn again over the devices
    it trained on (:func:`~cdmpp.train.devices.own_split_corpus`; a device that ``cdmpp
    adapt`` added later is left out), so no test program is used for calibration.  A
    checkpoint trained with trace tokens sees each program's trace; one trained with
    trace dropout (``trace_optional``) is calibrated a second time on the same programs
    without their traces, the intervals it serves for bare PrimFuncs (key
    ``interval_without_trace``).

    Args:
        checkpoint: a folder written by ``cdmpp train -d DATASET`` (a device table).
        root: the dataset it was trained on (a folder of device folders, or several).
        method: the method the checkpoint serves (one of ``METHODS``).
        write: store the calibration (and ``method``) in the checkpoint's ``config.json``.

    Returns:
        ``{metadata key: (calibration, {split: {device id or "all": {method: coverage
        row}}})}`` with the key ``interval`` (and ``interval_without_trace``), for the
        splits ``validation`` and, when the checkpoint holds one out, ``test``.

    Raises:
        CheckpointError: no device table.  InputError: an unknown method, or ``root``
        lacks a device the checkpoint trained on.  DatasetError: ``root`` holds no
        device the checkpoint knows.
    """

    if method not in METHODS:
        raise InputError(f"unknown interval method {method!r}; choose from {METHODS}")
    cfg = cfg or IntervalConfig()
    model, meta = load_checkpoint(Path(checkpoint))
    if not checkpoint_meta(meta).devices:
        raise CheckpointError(f"{checkpoint} has no device table; calibrate a checkpoint of cdmpp train -d DATASET")
    corpus, rows, split = own_split_corpus(meta, root, cache_dir, progress)
    out = {}
    for key, traces in [(INTERVAL_KEY, True)] + ([(INTERVAL_KEY_WITHOUT_TRACE, False)]
                                                  if model.config.trace_optional else []):
        calibration, report = _calibrate_split(model, corpus.for_model(model.config, traces), rows, split, cfg)
        calibration["method"] = method
        calibration["calibrated_on"] = (f"validation workloads of {dataset_label(root)} ({len(split.val)} programs"
                                        + (")" if traces else ", without their traces)"))
        out[key] = (calibration, report)
    if write:
        path = Path(checkpoint) / CONFIG_FILE
        cfg_json = json.loads(path.read_text(encoding="utf-8"))
        for key, (calibration, report) in out.items():
            cfg_json.setdefault("metadata", {})[key] = {**calibration, "coverage": report}
        path.write_text(json.dumps(cfg_json, indent=1), encoding="utf-8")
        card = Path(checkpoint) / CARD_FILE
        if card.exists():
            kept = adapted_sections(card.read_text(encoding="utf-8"))  # adapt's sections outlive a new card
            card.write_text(model_card(model.config, cfg_json["metadata"]) + kept, encoding="utf-8")
    return out


INTERVAL_KEY = "interval"
"""The metadata key of a checkpoint's interval calibration."""
INTERVAL_KEY_WITHOUT_TRACE = "interval_without_trace"
"""The metadata key of a ``trace_optional`` checkpoint's calibration for programs without a trace."""


def _calibrate_split(model, corpus, rows: np.ndarray, split, cfg: IntervalConfig):
    """Calibration on ``split.val`` and the coverage report (validation and test)."""
    point, passes = mc_log_latency(model, corpus.data, split.val, rows[split.val], cfg)
    calibration = calibrate(point, passes, corpus.data.latency[split.val], cfg)
    report: dict[str, dict[str, dict]] = {}
    for name, index in (("validation", split.val), ("test", split.test)):
        if len(index) == 0:
            continue
        if name == "test":
            point, passes = mc_log_latency(model, corpus.data, index, rows[index], cfg)
        true = corpus.data.latency[index]
        dev_of = np.asarray([corpus.devices[r - 1].row_name for r in corpus.data.device_row[index]])
        bounds = interval_methods(point, passes, calibration)
        part: dict[str, dict] = {}
        for key in ["all", *sorted(set(dev_of))]:
            sel = np.ones(len(index), bool) if key == "all" else dev_of == key
            part[key] = {m: coverage_row(b[0][sel], b[1][sel], true[sel], np.exp(point[sel])) for m, b in bounds.items()}
        for m, thirds in coverage_by_std(point, passes, true, calibration).items():
            part["all"][m]["by_std_thirds"] = thirds
        report[name] = part
    return calibration, report


def format_coverage(report: dict[str, dict[str, dict]], calibration: dict) -> str:
    """The coverage report as a Markdown table, one row per split, device and method."""
    level = f"{100 * calibration['lower']:.0f}-{100 * calibration['upper']:.0f}%"
    lines = [
        f"{level} intervals from {calibration['passes']} MC-dropout passes; calibrated on {calibration['programs']} "
        f"validation programs",
        "",
        "| split | device | method | programs | coverage | below | above | median high/low | coverage by MC-std third |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for split, part in report.items():
        for device_id, methods in part.items():
            for m, r in methods.items():
                lines.append(
                    f"| {split} | {device_id} | {m} | {r['programs']} | {100 * r['coverage']:.1f}% | {100 * r['below']:.1f}% | "
                    f"{100 * r['above']:.1f}% | {r['median_width_ratio']:.2f} | "
                    + " / ".join(f"{100 * c:.0f}%" for c in r.get("by_std_thirds", [])) + " |"
                )
    return "\n".join(lines)


def coverage_by_std(point: np.ndarray, passes: np.ndarray, true_s: np.ndarray, calibration: dict) -> dict[str, list[float]]:
    """Coverage of each method in each third of the programs ordered by MC standard deviation
    (lowest first): whether an interval is as trustworthy for uncertain programs as for sure ones."""
    thirds = np.array_split(np.argsort(mc_std(passes), kind="stable"), 3)
    t = np.asarray(true_s, dtype=np.float64)
    out = {}
    for m, (lo, hi) in interval_methods(point, passes, calibration).items():
        inside = (t >= lo) & (t <= hi)
        out[m] = [float(np.mean(inside[i])) for i in thirds if i.size]
    return out
