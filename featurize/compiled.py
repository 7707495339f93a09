"""The compiled compact-AST walk (``featurize/ast_walk.cc``), built by ``pip install`` as the
library ``cdmpp/featurize/_ast_walk*.so`` and called through tvm-ffi.

It computes what the Python walk of :mod:`cdmpp.featurize.ast` and
:mod:`cdmpp.featurize.access` computes, value for value (a test compares every feature of the
slice's programs), about 15 times faster.  A program it leaves to the Python walk (an
annotation value that is neither an integer nor a string, a loop kind it does not know, an
access with fewer indices than its buffer has dimensions) is walked in Python, with the same
result.
"""

from __future__ import annotations

import importlib.machinery
import warnings
from pathlib import Path

import numpy as np

_LIBRARY_STEM = "_ast_walk"
_HEADER_BYTES = 72  # the marker (8 bytes), then 8 int64


class _Library:
    """The loaded library, loaded on first use (``None`` until then; ``False`` when missing)."""

    walk = None


def library_path() -> Path | None:
    """The compiled walk's shared library next to this module, or ``None`` when it was not
    built (a checkout used without ``pip install -e .``)."""
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = here / f"{_LIBRARY_STEM}{suffix}"
        if path.is_file():
            return path
    return None


def compiled_walk():
    """The library's ``cdmpp_walk`` function, or ``None`` (with one warning) when the library
    was not built."""
    if _Library.walk is None:
        path = library_path()
        if path is None:
            warnings.warn("cdmpp's compiled featurizer is not built (run `pip install -e .` in the checkout); "
                          "featurizing in Python, about 15x slower", RuntimeWarning, stacklevel=3)
            _Library.walk = False
        else:
            import tvm_ffi  # noqa: PLC0415  (keeps tvm_ffi off this module's import)

            _Library.walk = tvm_ffi.load_module(str(path))["cdmpp_walk"]
    return _Library.walk or None


def unpack(payload: bytes, feature_dim: int) -> tuple | str:
    """The arrays of a walk's payload, or the reason the Python walk must do this program
    (``"F..."``) or why the program is refused (``"E..."``).

    Returns:
        ``(node_parent, node_kind, node_extent, annotation_counts, leaf_position,
        leaf_features, strings, dropped_leaves)``: int64 ``(N,)`` four times, int64 ``(L,)``,
        float32 ``(L, feature_dim)``, the ``\\0``-separated strings (node names, leaf buffers,
        annotation keys and values) and an int.
    """
    if payload[:1] != b"P":
        return payload.decode("utf-8", "replace")
    n, leaves, dropped, string_bytes = (int(x) for x in np.frombuffer(payload, np.int64, 4, 8))
    off = _HEADER_BYTES
    arrays = []
    for dtype, count in ((np.int64, n), (np.int64, n), (np.int64, n), (np.int64, n), (np.int64, leaves),
                         (np.float32, leaves * feature_dim)):
        a = np.frombuffer(payload, dtype, count, off)
        off += (a.nbytes + 7) // 8 * 8
        arrays.append(a)
    strings = payload[off : off + string_bytes].decode("utf-8").split("\0")
    return (*arrays[:5], arrays[5].reshape(leaves, feature_dim), strings, dropped)
