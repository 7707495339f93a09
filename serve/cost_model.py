"""A MetaSchedule cost-model plugin backed by cdmpp.

``PyCostModel.predict`` must return scores where higher means faster; TVM's own
XGBModel trains on ``min_cost / cost``.  :class:`CdmppCostModel` predicts latency
and returns ``min(latency) / latency`` over the candidates of each call, so the
predicted-fastest candidate scores 1.0.

    >>> from cdmpp.serve.cost_model import CdmppCostModel
    >>> ms.tune_tir(mod, target, work_dir, max_trials_global=64,
    ...             cost_model=CdmppCostModel())  # doctest: +SKIP
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from cdmpp.tvm_compat import derived_object, ms


@derived_object
class CdmppCostModel(ms.cost_model.PyCostModel):
    """cdmpp's latency predictor as a MetaSchedule cost model (no online update).

    Args:
        checkpoint: checkpoint folder; ``None`` uses the shipped one.
    """

    def __init__(self, checkpoint: str | None = None):
        super().__init__()
        from cdmpp.predictor import LatencyPredictor  # pylint: disable=import-outside-toplevel

        self.checkpoint = checkpoint
        self.predictor = LatencyPredictor.load(checkpoint)

    def load(self, path: str) -> None:
        """Load a checkpoint folder."""
        from cdmpp.predictor import LatencyPredictor  # pylint: disable=import-outside-toplevel

        self.checkpoint = path
        self.predictor = LatencyPredictor.load(path)

    def save(self, path: str) -> None:
        """Copy the checkpoint folder in use to ``path``."""
        from cdmpp.predictor import DEFAULT_CHECKPOINT  # pylint: disable=import-outside-toplevel

        shutil.copytree(Path(self.checkpoint or DEFAULT_CHECKPOINT), path, dirs_exist_ok=True)

    def update(self, context, candidates, results) -> None:
        """Measured results are not used: the model is trained offline."""

    def predict(self, context, candidates) -> np.ndarray:
        """Scores, float64 ``(len(candidates),)``: ``min(latency) / latency`` (1.0 = fastest)."""
        if len(candidates) == 0:
            return np.zeros(0, dtype=np.float64)
        lat = self.predictor.predict([c.sch.mod for c in candidates], context.target)
        return lat.min() / lat
