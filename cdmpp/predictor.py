"""The prediction API: scheduled programs in, latencies in seconds out."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

DEFAULT_CHECKPOINT = Path(__file__).parent / "checkpoints" / "default"


class LatencyPredictor:
    """A trained latency model ready to predict.

    Build it with :meth:`load`.  ``metadata`` holds what the checkpoint recorded
    (dataset, device, held-out network and its metrics).
    """

    def __init__(self, model, metadata: dict):
        self.model = model
        self.metadata = metadata

    @classmethod
    def load(cls, path: str | Path | None = None) -> "LatencyPredictor":
        """Load a checkpoint folder (``model.safetensors`` + ``config.json``).

        Args:
            path: the folder; ``None`` loads the checkpoint shipped in the package,
                trained on the shipped dataset.

        Raises:
            CheckpointError: a missing or corrupt file.
        """
        from cdmpp.train.model import load_checkpoint  # pylint: disable=import-outside-toplevel

        model, meta = load_checkpoint(Path(path) if path is not None else DEFAULT_CHECKPOINT)
        return cls(model, meta)

    @property
    def default_target(self) -> dict | None:
        """The TVM target (dict) of the device the checkpoint was trained on, if recorded."""
        return self.metadata.get("device", {}).get("target")

    def predict(self, mods, target=None) -> np.ndarray:
        """Predict latencies.

        Args:
            mods: a sequence of scheduled PrimFuncs, one-PrimFunc IRModules,
                Schedules or TuningRecords (a single one is accepted too).
            target: TVM target (``Target``, dict or tag) for feature extraction;
                defaults to the checkpoint's device target.

        Returns:
            float64 ``(len(mods),)``: predicted latency of each program in seconds.

        Raises:
            UnsupportedProgramError: an input that is not a scheduled program, or
                holds a construct the featurizer does not support.
        """
        from cdmpp.featurize import featurize_many  # pylint: disable=import-outside-toplevel

        if not isinstance(mods, (list, tuple)):
            mods = [mods]
        if not mods:
            return np.zeros(0, dtype=np.float64)
        return self.predict_trees(featurize_many(list(mods), target if target is not None else self.default_target))

    def predict_trees(self, trees) -> np.ndarray:
        """Predicted latencies in seconds, float64 ``(len(trees),)``, of featurized programs
        (:class:`cdmpp.featurize.ProgramAST`, e.g. from ``featurize_many``)."""
        # pylint: disable=import-outside-toplevel
        from cdmpp.featurize.batch import from_trees
        from cdmpp.train.model import predict_latency_array

        n = len(trees)
        if n == 0:
            return np.zeros(0, dtype=np.float64)
        data = from_trees(trees, np.ones(n), np.zeros(n, np.int64), ["?"], np.zeros(n))
        return predict_latency_array(self.model, data)


@lru_cache(maxsize=4)
def _cached(path: str | None) -> LatencyPredictor:
    return LatencyPredictor.load(path)


def predict_latency(mod, target=None, checkpoint: str | Path | None = None) -> float:
    """Predicted latency in seconds of one scheduled program (see :meth:`LatencyPredictor.predict`).

    The checkpoint (default: the shipped one) is loaded once and reused.
    """
    return float(_cached(str(checkpoint) if checkpoint else None).predict([mod], target)[0])
