"""Loop tokens: every loop of the compact AST as a token beside the leaves.

CDMPP (EuroSys 2024, section 4.1) feeds the transformer the leaves of the compact AST
only; each leaf carries its loop nest as sums and products of extents.  A loop token
carries one loop itself: its kind, extent, depth, what it encloses and its
annotations.  The loops sit in pre-order among the leaves (their pre-order numbers are
their positions for the positional encoding), so that the order and the sizes of the
loops of a tiled kernel reach the model, and a bare PrimFunc, which has no schedule
trace, still shows its loop structure.

The leaf features (:data:`cdmpp.featurize.ast.FEATURIZER_VERSION`) are unchanged: loop
tokens are derived from the tree's nodes (``ProgramAST.node_*``), kept beside the leaves
in :class:`cdmpp.featurize.batch.FeaturizedPrograms` (``loop_x``, ``loop_pos``,
``loop_ptr``) and merged into the token sequence by :func:`with_loop_tokens`.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from cdmpp.errors import InputError

from .ast import LEAF, ROOT, ProgramAST

LOOP_FEATURES = (
    "kind_serial",
    "kind_parallel",
    "kind_vectorized",
    "kind_unrolled",
    "kind_thread_binding",
    "extent",  # log2(1 + extent); 0 when symbolic
    "symbolic",
    "depth",  # loops enclosing this one
    "outer_iterations",  # log2 of the product of the enclosing loops' extents
    "body_iterations",  # log2 of the largest product of extents from this loop down to a leaf
    "leaves_below",  # log2(1 + stores inside)
    "loops_below",  # log2(1 + loops inside)
    "innermost",
    "unroll_max_step",  # log2(1 + pragma_auto_unroll_max_step)
    "unroll_explicit",
    "annotations",  # other annotations
    "block_idx",
    "thread_idx",
    "vthread",
)
LOOP_DIM = len(LOOP_FEATURES)
_KNOWN_ANNOTATIONS = ("pragma_auto_unroll_max_step", "pragma_unroll_explicit", "thread_tag")


def loop_rows(tree: ProgramAST) -> tuple[np.ndarray, np.ndarray]:
    """The loop tokens of one compact AST.

    Returns:
        ``(rows, positions)``: float32 ``(K, LOOP_DIM)`` (:data:`LOOP_FEATURES`) and int32
        ``(K,)`` pre-order node numbers, one per loop in pre-order (``K`` may be 0).
    """
    parent, kind, extent = tree.node_parent, tree.node_kind, tree.node_extent
    n = len(parent)
    is_loop = (kind != ROOT) & (kind != LEAF)
    log_ext = np.where(is_loop & (extent > 0), np.log2(np.maximum(extent, 1)), 0.0)
    depth = np.zeros(n, np.int64)
    outer = np.zeros(n, np.float64)
    for i in range(1, n):  # pre-order: a parent comes before its children
        p = parent[i]
        depth[i] = depth[p] + (1 if is_loop[p] else 0)
        outer[i] = outer[p] + (log_ext[p] if is_loop[p] else 0.0)
    down = np.zeros(n, np.float64)  # the largest product of extents below a node (log2)
    leaves = np.zeros(n, np.int64)
    loops = np.zeros(n, np.int64)
    inner_loop = np.zeros(n, bool)  # has a loop child
    for i in range(n - 1, 0, -1):  # children before parents
        p = parent[i]
        own = down[i] + log_ext[i]
        down[p] = max(down[p], own)
        leaves[p] += leaves[i] + (1 if kind[i] == LEAF else 0)
        loops[p] += loops[i] + (1 if is_loop[i] else 0)
        inner_loop[p] |= bool(is_loop[i])
    idx = np.nonzero(is_loop)[0]
    rows = np.zeros((len(idx), LOOP_DIM), np.float32)
    for r, i in enumerate(idx):
        ann = tree.node_annotations[i]
        tag = ann.get("thread_tag", "")
        try:
            unroll = float(ann.get("pragma_auto_unroll_max_step", 0) or 0)
        except ValueError:
            unroll = 0.0
        rows[r, int(kind[i])] = 1.0
        rows[r, 5:] = (
            math.log2(1 + max(int(extent[i]), 0)),
            1.0 if extent[i] < 0 else 0.0,
            float(depth[i]),
            outer[i],
            down[i] + log_ext[i],
            math.log2(1 + leaves[i]),
            math.log2(1 + loops[i]),
            0.0 if inner_loop[i] else 1.0,
            math.log2(1 + max(unroll, 0.0)),
            1.0 if str(ann.get("pragma_unroll_explicit", "0")) not in ("0", "False", "") else 0.0,
            float(sum(1 for k in ann if k not in _KNOWN_ANNOTATIONS)),
            1.0 if tag.startswith("blockIdx") else 0.0,
            1.0 if tag.startswith("threadIdx") else 0.0,
            1.0 if tag.startswith("vthread") else 0.0,
        )
    return rows, idx.astype(np.int32)


def stack_loops(trees: list[ProgramAST]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The loop tokens of ``P`` trees stacked: ``(loop_x, loop_pos, loop_ptr)``, float32
    ``(sum K_i, LOOP_DIM)``, int32 ``(sum K_i,)`` and int64 ``(P + 1,)``."""
    parts = [loop_rows(t) for t in trees]
    if not parts:
        return np.zeros((0, LOOP_DIM), np.float32), np.zeros(0, np.int32), np.zeros(1, np.int64)
    return (
        np.concatenate([r for r, _ in parts]).astype(np.float32),
        np.concatenate([p for _, p in parts]).astype(np.int32),
        np.concatenate([[0], np.cumsum([len(p) for _, p in parts])]).astype(np.int64),
    )


def merge_tokens(x: np.ndarray, pos: np.ndarray, ptr: np.ndarray, loop_x: np.ndarray, loop_pos: np.ndarray,
                 loop_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Leaves and loops of ``P`` programs in one token sequence per program, in pre-order.

    Args:
        x, pos, ptr: the leaves: float32 ``(N, F)``, int ``(N,)`` positions, int64 ``(P + 1,)``.
        loop_x, loop_pos, loop_ptr: the loops: float32 ``(K, LOOP_DIM)``, int ``(K,)``,
            int64 ``(P + 1,)``.

    Returns:
        ``(x, pos, ptr)``: float32 ``(N + K, F + LOOP_DIM + 1)`` (a leaf row is its
        features, zeros and 0; a loop row is zeros, its loop features and 1, the loop
        flag), positions and pointers to match.

    Raises:
        InputError: the two do not describe the same number of programs.
    """
    if len(ptr) != len(loop_ptr):
        raise InputError(f"leaves of {len(ptr) - 1} programs and loops of {len(loop_ptr) - 1}")
    n, k, f = x.shape[0], loop_x.shape[0], x.shape[1]
    rows = np.zeros((n + k, f + LOOP_DIM + 1), np.float32)
    rows[:n, :f] = x
    rows[n:, f:f + LOOP_DIM] = loop_x
    rows[n:, -1] = 1.0
    program = np.concatenate([np.repeat(np.arange(len(ptr) - 1), np.diff(ptr)),
                              np.repeat(np.arange(len(loop_ptr) - 1), np.diff(loop_ptr))])
    allpos = np.concatenate([np.asarray(pos, np.int64), np.asarray(loop_pos, np.int64)])
    order = np.lexsort((allpos, program))
    counts = np.diff(ptr) + np.diff(loop_ptr)
    new_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return rows[order], allpos[order].astype(np.asarray(pos).dtype), new_ptr


def with_loop_tokens(data):
    """``data`` (:class:`cdmpp.featurize.batch.FeaturizedPrograms`) with its loop tokens
    among the leaves (:func:`merge_tokens`); the loops are dropped from the copy.

    Raises:
        InputError: ``data`` was featurized without its loops (an older cache entry:
            featurize again with ``loops=True``).
    """
    if data.loop_x is None or data.loop_pos is None or data.loop_ptr is None:
        raise InputError("these programs were featurized without their loops; featurize them again "
                         "(featurize_database(..., loops=True))")
    x, pos, ptr = merge_tokens(data.x, data.pos, data.ptr, data.loop_x, data.loop_pos, data.loop_ptr)
    return dataclasses.replace(data, x=x, pos=pos, ptr=ptr, loop_x=None, loop_pos=None, loop_ptr=None)
