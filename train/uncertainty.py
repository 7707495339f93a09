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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from cdmpp.errors import CheckpointError, InputError

METHODS = ("mc-normalized", "mc-raw", "constant")
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0)
MIN_STD = 1e-3  # floor of the MC standard deviation (natural log units), so that r stays finite


@dataclass
class IntervalConfig:
    """How intervals are computed.

    Attributes:
        passes: MC-dropout forward passes per program.
        lower: lower quantile of the interval (0.1: a 10-90% interval).
        upper: upper quantile.
        seed: torch seed of the dropout masks (the same inputs give the same interval).
    """

    passes: int = 16
    lower: float = 0.1
    upper: float = 0.9
    seed: int = 0

    def __post_init__(self):
        if self.passes < 2:
            raise InputError(f"passes must be >= 2, got {self.passes}")
        if not 0.0 < self.lower < self.upper < 1.0:
            raise InputError(f"need 0 < lower < upper < 1, got {self.lower} and {self.upper}")


@torch.no_grad()
def mc_log_latency(model, data, index=None, device=None, cfg: IntervalConfig | None = None, batch_size: int = 512):
    """Point and MC-dropout log-latencies of programs ``index`` of ``data``.

    Args:
        model: a :class:`~cdmpp.train.model.LatencyTransformer` (its dropout rate is used).
        data: :class:`~cdmpp.featurize.batch.FeaturizedPrograms`.
        index: int ``(K,)`` programs (default all).
        device: device-table rows, as :func:`~cdmpp.train.model.predict_latency_array` takes them.

    Returns:
        ``(point, passes)``: float64 ``(K,)`` natural log of seconds with dropout off,
        and float64 ``(P, K)`` with dropout on, one row per pass.
    """
    from cdmpp.featurize.batch import dense_programs  # pylint: disable=import-outside-toplevel

    cfg = cfg or IntervalConfig()
    index = np.arange(len(data)) if index is None else np.asarray(index, dtype=np.int64)
    if device is None:
        device = data.device[index] if getattr(data, "device", None) is not None else 0
    dev = torch.as_tensor(np.broadcast_to(np.asarray(device, dtype=np.int64), index.shape).copy())
    gen_state = torch.random.get_rng_state()
    point, passes = [], []
    try:
        model.eval()
        for s in range(0, len(index), batch_size):
            x, pos, mask = dense_programs(data, index[s : s + batch_size])
            point.append(model.predict_log_latency(x, pos, mask, dev[s : s + batch_size]).double())
        model.train()  # dropout on; the model has no batch norm, so nothing else changes
        for k, i in enumerate(index):
            # one program at a time, its passes as one batch, the seed set anew: a program's
            # interval never depends on which other programs share the call
            torch.manual_seed(cfg.seed)
            x, pos, mask = dense_programs(data, np.full(cfg.passes, i))
            passes.append(model.predict_log_latency(x, pos, mask, dev[k].repeat(cfg.passes)).double())
    finally:
        model.eval()
        torch.random.set_rng_state(gen_state)
    if not point:
        return np.zeros(0), np.zeros((cfg.passes, 0))
    return torch.cat(point).numpy(), torch.stack(passes, dim=1).numpy()


def mc_std(passes: np.ndarray) -> np.ndarray:
    """Standard deviation over the passes, float64 ``(K,)``, floored at ``MIN_STD``."""
    return np.maximum(np.std(passes, axis=0), MIN_STD)


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
        raise ValueError(f"need matching non-empty arrays, got {point.shape}, {passes.shape} and {y.shape}")
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


def interval_methods(point: np.ndarray, passes: np.ndarray, calibration: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Interval bounds in seconds, ``(low (K,), high (K,))`` float64, of each method in ``METHODS``."""
    s = mc_std(passes)
    lo, hi = calibration["lower"], calibration["upper"]
    out = {}
    c = calibration["mc-normalized"]
    w = s ** c.get("alpha", 1.0)
    out["mc-normalized"] = (np.exp(point + c["q_lower"] * w), np.exp(point + c["q_upper"] * w))
    out["mc-raw"] = (np.exp(np.quantile(passes, lo, axis=0)), np.exp(np.quantile(passes, hi, axis=0)))
    c = calibration["constant"]
    out["constant"] = (np.exp(point + c["q_lower"]), np.exp(point + c["q_upper"]))
    return out


def interval(point: np.ndarray, passes: np.ndarray, calibration: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """The served interval in seconds, ``(low (K,), high (K,))``: ``calibration["method"]``'s
    (default ``mc-normalized``), or the raw MC-dropout percentiles when the checkpoint
    records no calibration."""
    if not calibration:
        lo, hi = np.quantile(passes, 0.1, axis=0), np.quantile(passes, 0.9, axis=0)
        return np.exp(lo), np.exp(hi)
    return interval_methods(point, passes, calibration)[calibration.get("method", "mc-normalized")]


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
) -> tuple[dict, dict[str, dict[str, dict]]]:
    """Calibrate a device-table checkpoint's intervals on its validation workloads and
    score every method's coverage on its held-out network (when it has one).

    The validation workloads are the checkpoint's own split
    (:func:`~cdmpp.train.devices.split_corpus` with its recorded holdout and seed 0),
    so no test program is used for calibration.

    Args:
        checkpoint: a folder written by ``cdmpp train -d DATASET`` (a device table).
        root: the dataset it was trained on (a folder of device folders, or several).
        method: the method the checkpoint serves (one of ``METHODS``).
        write: store the calibration (and ``method``) in the checkpoint's ``config.json``.

    Returns:
        ``(calibration, {split: {device id or "all": {method: coverage row}}})`` for the
        splits ``validation`` and, when the checkpoint holds one out, ``test``.

    Raises:
        CheckpointError: no device table.  InputError: an unknown method.
        DatasetError: ``root`` holds no device the checkpoint knows.
    """
    # pylint: disable=import-outside-toplevel
    from .devices import CARD_FILE, checkpoint_corpus, dataset_label, model_card, split_corpus
    from .model import CONFIG_FILE, load_checkpoint

    if method not in METHODS:
        raise InputError(f"unknown interval method {method!r}; choose from {METHODS}")
    cfg = cfg or IntervalConfig()
    model, meta = load_checkpoint(Path(checkpoint))
    if not meta.get("devices"):
        raise CheckpointError(f"{checkpoint} has no device table; calibrate a checkpoint of cdmpp train -d DATASET")
    corpus, rows = checkpoint_corpus(meta, root, cache_dir, progress)
    split = split_corpus(corpus, meta.get("holdout"))
    point, passes = mc_log_latency(model, corpus.data, split.val, rows[split.val], cfg)
    calibration = calibrate(point, passes, corpus.data.latency[split.val], cfg)
    calibration["method"] = method
    calibration["calibrated_on"] = f"validation workloads of {dataset_label(root)} ({len(split.val)} programs)"
    report: dict[str, dict[str, dict]] = {}
    for name, index in (("validation", split.val), ("test", split.test)):
        if len(index) == 0:
            continue
        if name == "test":
            point, passes = mc_log_latency(model, corpus.data, index, rows[index], cfg)
        true = corpus.data.latency[index]
        dev_of = np.asarray([corpus.devices[r - 1].device_id for r in corpus.data.device[index]])
        bounds = interval_methods(point, passes, calibration)
        part: dict[str, dict] = {}
        for key in ["all", *sorted(set(dev_of))]:
            sel = np.ones(len(index), bool) if key == "all" else dev_of == key
            part[key] = {m: coverage_row(b[0][sel], b[1][sel], true[sel], np.exp(point[sel])) for m, b in bounds.items()}
        for m, thirds in coverage_by_std(point, passes, true, calibration).items():
            part["all"][m]["by_std_thirds"] = thirds
        report[name] = part
    if write:
        path = Path(checkpoint) / CONFIG_FILE
        cfg_json = json.loads(path.read_text(encoding="utf-8"))
        cfg_json.setdefault("metadata", {})["interval"] = {**calibration, "coverage": report}
        path.write_text(json.dumps(cfg_json, indent=1), encoding="utf-8")
        card = Path(checkpoint) / CARD_FILE
        if card.exists():
            card.write_text(model_card(model.config, cfg_json["metadata"]), encoding="utf-8")
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
        for dev, methods in part.items():
            for m, r in methods.items():
                lines.append(
                    f"| {split} | {dev} | {m} | {r['programs']} | {100 * r['coverage']:.1f}% | {100 * r['below']:.1f}% | "
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
