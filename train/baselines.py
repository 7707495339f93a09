"""Baselines trained on the same split as the transformer.

:class:`TreeBaseline` is the TenSet/Ansor baseline: gradient-boosted trees over
TVM's 164-dim ``PerStoreFeature`` rows, summed per program (TVM's XGBModel sums
its per-store outputs per program; here the rows are summed before the trees),
regressing the natural log of latency.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


class NotFittedError(RuntimeError):
    """``predict`` was called before ``fit``."""


@dataclass
class TreeBaseline:
    """XGBoost regression of log-latency on per-program summed ``PerStoreFeature``.

    ``fit(features, latency)``: float32 ``(P, 164)`` and seconds ``(P,)``; returns
    ``self`` and sets ``booster_``.  ``predict(features)`` returns float64 seconds
    ``(P,)`` and raises :class:`NotFittedError` before ``fit``.
    """

    n_estimators: int = 400
    max_depth: int = 8
    learning_rate: float = 0.05
    seed: int = 0

    def fit(self, features: np.ndarray, latency: np.ndarray) -> "TreeBaseline":
        import xgboost as xgb  # pylint: disable=import-outside-toplevel

        model = xgb.XGBRegressor(
            n_estimators=self.n_estimators,
            max_depth=self.max_depth,
            learning_rate=self.learning_rate,
            subsample=0.8,
            colsample_bytree=0.8,
            random_state=self.seed,
            n_jobs=2,
            tree_method="hist",
        )
        model.fit(np.asarray(features, np.float32), np.log(np.asarray(latency, np.float64)))
        self.booster_ = model.get_booster()
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        import xgboost as xgb  # pylint: disable=import-outside-toplevel

        if not hasattr(self, "booster_"):
            raise NotFittedError("TreeBaseline is not fitted; call fit() first")
        out = self.booster_.predict(xgb.DMatrix(np.asarray(features, np.float32)))
        return np.exp(out.astype(np.float64))

    def save(self, path: Path) -> None:
        """Write the booster in XGBoost's JSON format (no pickle)."""
        if not hasattr(self, "booster_"):
            raise NotFittedError("TreeBaseline is not fitted; nothing to save")
        self.booster_.save_model(str(path))

    @staticmethod
    def load(path: Path) -> "TreeBaseline":
        """Read a booster written by :meth:`save`.

        Raises:
            ValueError: the file is missing or not an XGBoost model.
        """
        import xgboost as xgb  # pylint: disable=import-outside-toplevel

        out = TreeBaseline()
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except (xgb.core.XGBoostError, OSError) as err:
            raise ValueError(f"corrupt or missing tree-baseline model {path}: {err}") from err
        out.booster_ = booster
        return out


@dataclass
class FlopsBaseline:
    """No learning: latency = FLOPs / the best throughput observed in training.

    ``fit(flops, latency)`` (both ``(P,)``; programs with 0 FLOPs ignored) sets
    ``throughput_`` (FLOP/s, the maximum observed); ``predict(flops)`` returns
    seconds, float64 ``(P,)``, with a floor at the fastest training latency for
    programs of unknown (0) FLOPs.
    """

    def fit(self, flops: np.ndarray, latency: np.ndarray) -> "FlopsBaseline":
        flops, latency = np.asarray(flops, np.float64), np.asarray(latency, np.float64)
        ok = flops > 0
        if not ok.any():
            raise ValueError("no training program with known FLOPs")
        self.throughput_ = float(np.max(flops[ok] / latency[ok]))
        self.floor_ = float(np.min(latency))
        return self

    def predict(self, flops: np.ndarray) -> np.ndarray:
        if not hasattr(self, "throughput_"):
            raise NotFittedError("FlopsBaseline is not fitted; call fit() first")
        return np.maximum(np.asarray(flops, np.float64) / self.throughput_, self.floor_)
