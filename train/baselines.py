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

from cdmpp.errors import CdmppError, CheckpointError, InputError
from cdmpp.featurize.ast import PSF_DIM


class NotFittedError(CdmppError, RuntimeError):
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
        import xgboost as xgb  # noqa: PLC0415  (keeps xgboost off this module's import)

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
        import xgboost as xgb  # noqa: PLC0415  (keeps xgboost off this module's import)

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
        import xgboost as xgb  # noqa: PLC0415  (keeps xgboost off this module's import)

        out = TreeBaseline()
        booster = xgb.Booster()
        try:
            booster.load_model(str(path))
        except (xgb.core.XGBoostError, OSError) as err:
            raise CheckpointError(f"corrupt or missing tree-baseline model {path}: {err}") from err
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
            raise InputError("no training program with known FLOPs")
        self.throughput_ = float(np.max(flops[ok] / latency[ok]))
        self.floor_ = float(np.min(latency))
        return self

    def predict(self, flops: np.ndarray) -> np.ndarray:
        if not hasattr(self, "throughput_"):
            raise NotFittedError("FlopsBaseline is not fitted; call fit() first")
        return np.maximum(np.asarray(flops, np.float64) / self.throughput_, self.floor_)


def store_rows(data, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``PerStoreFeature`` rows of programs ``index``, one per written buffer.

    Returns:
        ``(rows, segment)``: float32 ``(R, 164)`` and int64 ``(R,)`` (position in
        ``index`` of each row's program).  A program without a row (e.g. only constant
        stores) gets one zero row.

    Raises:
        InputError: ``data`` was featurized without ``PerStoreFeature`` rows.
    """

    rows, seg = [], []
    for j, i in enumerate(np.asarray(index, dtype=np.int64)):
        x = data.psf_rows(int(i))
        if len(x) == 0:
            x = np.zeros((1, PSF_DIM), np.float32)
        rows.append(x)
        seg.append(np.full(len(x), j, dtype=np.int64))
    return np.concatenate(rows).astype(np.float32), np.concatenate(seg)


class _RowTable:
    """:func:`store_rows` of every program of ``data``, computed once, sliced per batch."""

    def __init__(self, data):
        self.data = data
        self.rows, seg = store_rows(data, np.arange(len(data)))
        self.ptr = np.searchsorted(seg, np.arange(len(data) + 1))

    def rows_of(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        parts = [np.arange(self.ptr[i], self.ptr[i + 1]) for i in index]
        seg = np.concatenate([np.full(len(p), j, dtype=np.int64) for j, p in enumerate(parts)])
        return self.rows[np.concatenate(parts)], seg


@dataclass
class SegmentSumMLP:
    """TVM's MLPModel baseline: an MLP over each ``PerStoreFeature`` row, summed per program.

    Each row maps to a positive latency share (softplus); a program's shares are
    segment-summed and the loss is the MSE of the log of that sum against the log of
    the measured latency (TVM's MLPModel, ``python/tvm/s_tir/meta_schedule/cost_model/
    mlp_model.py``, also segment-sums per-store outputs; it regresses normalised
    throughput instead).  Trained with Lightning.

    ``fit(data, index)`` takes a :class:`~cdmpp.featurize.batch.FeaturizedPrograms` and
    training program indices, returns ``self`` and sets ``model_``; ``predict(data,
    index)`` returns float64 seconds ``(len(index),)`` and raises
    :class:`NotFittedError` before ``fit``.
    """

    hidden: int = 256
    epochs: int = 30
    batch_size: int = 128
    lr: float = 1e-3
    seed: int = 0

    def fit(self, data, index: np.ndarray) -> "SegmentSumMLP":
        import lightning as L  # noqa: PLC0415  (keeps lightning off this module's import)
        import torch  # noqa: PLC0415  (keeps torch off this module's import)

        from .lightning import SegmentSumModule, make_trainer  # noqa: PLC0415  (keeps lightning, torch off this module's import)

        L.seed_everything(self.seed, workers=True, verbose=False)
        index = np.asarray(index, dtype=np.int64)
        self._rows = _RowTable(data)
        rows = self._rows.rows_of(index)[0]
        self.mean_ = rows.mean(0)
        self.std_ = rows.std(0) + 1e-6
        self.log_scale_ = float(np.median(np.log(data.latency[index])))
        self.model_ = torch.nn.Sequential(
            torch.nn.Linear(rows.shape[1], self.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(self.hidden, self.hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(self.hidden, 1),
        )
        module = SegmentSumModule(self)
        loader = torch.utils.data.DataLoader(
            index, batch_size=self.batch_size, shuffle=True, collate_fn=lambda b: self._batch(data, np.asarray(b))
        )
        trainer = make_trainer(self.epochs)
        trainer.fit(module, train_dataloaders=loader)
        self.model_.cpu().eval()
        return self

    def _batch(self, data, index: np.ndarray):
        import torch  # noqa: PLC0415  (keeps torch off this module's import)

        if getattr(self, "_rows", None) is None or self._rows.data is not data:
            self._rows = _RowTable(data)
        rows, seg = self._rows.rows_of(index)
        x = torch.from_numpy((rows - self.mean_) / self.std_)
        y = torch.from_numpy(np.log(data.latency[index]).astype(np.float32))
        return x, torch.from_numpy(seg), len(index), y

    def log_latency(self, x, seg, n):
        """Predicted natural-log latency, ``(n,)``, of a batch of segment rows."""
        import torch  # noqa: PLC0415  (keeps torch off this module's import)

        share = torch.nn.functional.softplus(self.model_(x).squeeze(-1))
        total = torch.zeros(n, dtype=share.dtype).index_add_(0, seg, share)
        return torch.log(total + 1e-12) + self.log_scale_

    def predict(self, data, index: np.ndarray) -> np.ndarray:
        import torch  # noqa: PLC0415  (keeps torch off this module's import)

        if not hasattr(self, "model_"):
            raise NotFittedError("SegmentSumMLP is not fitted; call fit() first")
        index = np.asarray(index, dtype=np.int64)
        out = []
        with torch.no_grad():
            for s in range(0, len(index), 1024):
                x, seg, n, _ = self._batch(data, index[s : s + 1024])
                out.append(self.log_latency(x, seg, n).double().numpy())
        return np.exp(np.concatenate(out)) if out else np.zeros(0)
