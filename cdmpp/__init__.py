"""cdmpp: a learned latency cost model for TVM tensor programs.

Featurizes scheduled TensorIR PrimFuncs into compact ASTs and predicts their
latency with a transformer (after CDMPP, EuroSys 2024).  Importing ``cdmpp`` is
cheap; TVM and torch load on first use.

    >>> import cdmpp
    >>> cdmpp.predict_latency(scheduled_prim_func)  # seconds  # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = [
    "LatencyPredictor",
    "predict_latency",
    "CdmppError",
    "CheckpointError",
    "DatasetError",
    "DeviceUnavailableError",
    "InputError",
    "UnknownNetworkError",
    "MachineBusyError",
    "UnknownDeviceError",
    "UnsupportedProgramError",
    "__version__",
]

# where each lazily imported name lives (importing cdmpp stays cheap: no TVM, no torch)
_LAZY = {
    "LatencyPredictor": "cdmpp.predictor",
    "predict_latency": "cdmpp.predictor",
    "CdmppError": "cdmpp.errors",
    "UnknownDeviceError": "cdmpp.errors",
    "CheckpointError": "cdmpp.errors",
    "InputError": "cdmpp.errors",
    "UnknownNetworkError": "cdmpp.errors",
    "DatasetError": "cdmpp.errors",
    "DeviceUnavailableError": "cdmpp.errors",
    "MachineBusyError": "cdmpp.collect",
    "UnsupportedProgramError": "cdmpp.featurize.ast",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib  # noqa: PLC0415  (only on the branch that needs it)

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cdmpp' has no attribute {name!r}")
