"""What the prediction core (:meth:`cdmpp.predictor.LatencyPredictor.predict_each`) takes
besides programs, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # annotations only
    from .featurize import ProgramAST

OnError = Literal["raise", "mark", "zero"]
"""What the prediction core (:meth:`~cdmpp.predictor.LatencyPredictor.predict_each`) does with a program it
cannot featurize: ``"raise"`` its ``UnsupportedProgramError``; ``"mark"`` it with NaN
latencies and its reason in ``Predictions.problems`` (and the log), and go on with the
others; ``"zero"``, as ``"mark"`` but with an infinite latency, so that a tuner's score
(a reference time over the latency) is 0."""

ON_ERROR = ("raise", "mark", "zero")


@dataclass(frozen=True)
class FeaturizedProgram:
    """A program featurized already, which :meth:`~cdmpp.predictor.LatencyPredictor.predict_each` takes in
    place of the program (from an earlier call's ``keep_inputs``).

    Attributes:
        tree: its compact AST.
        trace: float32 ``(TRACE_DIM,)``: its schedule-trace vector (NaN: none), or ``None``
            for a checkpoint that reads no traces.
    """

    tree: "ProgramAST"
    trace: np.ndarray | None = None


@dataclass
class Predictions:
    """:meth:`~cdmpp.predictor.LatencyPredictor.predict_each`'s answer.

    Attributes:
        latency_s, low_s, high_s: float64 ``(N,)``: predicted latency and its 10-90%
            interval, seconds; NaN for a program that cannot be featurized.
        problems: ``N`` strings: ``""``, or why the program has no prediction.
        device: the device id predicted for (``None``: a checkpoint without a device table).
        trees: with ``keep_inputs``, each program's compact AST (``None``: not featurized).
        traces: with ``keep_inputs`` and a checkpoint that reads traces, float32
            ``(N, TRACE_DIM)``: each program's trace vector (NaN rows: none).
    """

    latency_s: np.ndarray
    low_s: np.ndarray
    high_s: np.ndarray
    problems: list[str]
    device: str | None = None
    trees: list | None = None
    traces: np.ndarray | None = None
