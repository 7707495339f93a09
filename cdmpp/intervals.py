"""Prediction intervals, the inference half: MC-dropout passes and the calibrated interval.

The calibration (fitting ``metadata["interval"]`` on validation workloads) is in
:mod:`cdmpp.train.uncertainty`; this half is what a prediction needs, torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from cdmpp.errors import InputError
from cdmpp.featurize.batch import dense_programs
from cdmpp.inference import check_inputs

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
def mc_log_latency(model, data, index=None, device_row=None, cfg: IntervalConfig | None = None, batch_size: int = 512):
    """Point and MC-dropout log-latencies of programs ``index`` of ``data``.

    Args:
        model: a :class:`LatencyTransformer` (its dropout rate is used).
        data: :class:`ProgramLeaves` (or :class:`~cdmpp.featurize.batch.FeaturizedPrograms`).
        index: int ``(K,)`` programs (default all).
        device_row: device-table rows, as :func:`predict_latency_array` takes them.

    Returns:
        ``(point, passes)``: float64 ``(K,)`` natural log of seconds with dropout off,
        and float64 ``(P, K)`` with dropout on, one row per pass.
    """

    cfg = cfg or IntervalConfig()
    check_inputs(model, data)
    index = np.arange(len(data)) if index is None else np.asarray(index, dtype=np.int64)
    if device_row is None:
        device_row = data.device_row[index] if getattr(data, "device_row", None) is not None else 0
    device_rows = torch.as_tensor(np.broadcast_to(np.asarray(device_row, dtype=np.int64), index.shape).copy())
    gen_state = torch.random.get_rng_state()
    point, passes = [], []
    try:
        model.eval()
        for s in range(0, len(index), batch_size):
            x, pos, mask = dense_programs(data, index[s : s + batch_size])
            point.append(model.predict_log_latency(x, pos, mask, device_rows[s : s + batch_size]).double())
        model.train()  # dropout on; the model has no batch norm, so nothing else changes
        for k, i in enumerate(index):
            # one program at a time, its passes as one batch, the seed set anew: a program's
            # interval never depends on which other programs share the call
            torch.manual_seed(cfg.seed)
            x, pos, mask = dense_programs(data, np.full(cfg.passes, i))
            passes.append(model.predict_log_latency(x, pos, mask, device_rows[k].repeat(cfg.passes)).double())
    finally:
        model.eval()
        torch.random.set_rng_state(gen_state)
    if not point:
        return np.zeros(0), np.zeros((cfg.passes, 0))
    return torch.cat(point).numpy(), torch.stack(passes, dim=1).numpy()


def mc_std(passes: np.ndarray) -> np.ndarray:
    """Standard deviation over the passes, float64 ``(K,)``, floored at ``MIN_STD``."""
    return np.maximum(np.std(passes, axis=0), MIN_STD)


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


