"""cdmpp: a learned latency cost model for TVM tensor programs.

Featurizes scheduled TensorIR PrimFuncs into compact ASTs and predicts their
latency with a transformer (after CDMPP, EuroSys 2024).  Importing ``cdmpp`` is
cheap; TVM and torch load on first use.

    >>> import cdmpp
    >>> cdmpp.predict_latency(scheduled_prim_func)  # seconds  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["LatencyPredictor", "predict_latency", "__version__"]


def __getattr__(name):
    if name in ("LatencyPredictor", "predict_latency"):
        from . import predictor  # pylint: disable=import-outside-toplevel

        return getattr(predictor, name)
    raise AttributeError(f"module 'cdmpp' has no attribute {name!r}")
