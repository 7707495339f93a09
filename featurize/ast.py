"""Compact AST of a scheduled TensorIR PrimFunc (CDMPP, EuroSys 2024, section 4.1).

Inner nodes are the loop nest (loops of extent 1 are dropped, as TVM's
``PerStoreFeature`` drops them); leaves are the ``BufferStore`` statements.  Blocks,
``SeqStmt``, ``IfThenElse``, ``AttrStmt`` and buffer declarations are transparent:
their children hang from the nearest enclosing loop.  Nodes are numbered in
pre-order with node 0 the PrimFunc root; a leaf's pre-order number is its position
for the positional encoding (section 4.2).

Each leaf's feature vector is ``OWN_FEATURES`` (computed here from the tree and the
store expression) followed by the 90 buffer-access features of
:mod:`cdmpp.featurize.access` (the layout of TVM ``PerStoreFeature``'s buffer-access
group, computed in the same pass over the loop nest, without TVM's lowering passes).
TVM's own ``PerStoreFeature`` rows (one per written buffer, 164 columns) can be
attached to the tree (``ProgramAST.psf``) for the baselines that use them (TVM's
XGBModel and MLPModel features); the transformer does not read them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from cdmpp.errors import CdmppError

from .access import ACCESS_NAMES, AccessState, ExprStats
from .compiled import compiled_walk, unpack

ROOT, SERIAL, PARALLEL, VECTORIZED, UNROLLED, THREAD_BINDING, LEAF = -1, 0, 1, 2, 3, 4, 5
LOOP_KIND_NAMES = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")

OWN_FEATURES = (
    "depth",
    "extent_serial",
    "extent_parallel",
    "extent_vectorized",
    "extent_unrolled",
    "extent_thread_binding",
    "iterations",
    "inner_extent",
    "inner_serial",
    "inner_parallel",
    "inner_vectorized",
    "inner_unrolled",
    "inner_thread_binding",
    "loads",
    "add_sub",
    "mul",
    "div_mod",
    "max_min",
    "calls",
    "select_cmp",
    "casts",
    "is_init",
    "dtype_bits",
    "lanes",
    "buffer_elems",
    "is_reduction",
    "auto_unroll_max_step",
    "program_leaves",
    "program_loops",
)
PSF_DIM = 164
"""Columns of one TVM ``PerStoreFeature`` row."""
FEATURIZER_VERSION = 3
"""Version of the leaf features; bumped whenever a change alters any feature value.
It is part of the featurization cache key and of every checkpoint (a checkpoint of
another version is refused on load).  2: stores of weight-layout-rewrite blocks get
no ``PerStoreFeature`` row.  3: the leaves carry the walk's buffer-access features
(:mod:`cdmpp.featurize.access`) instead of TVM's ``PerStoreFeature`` row."""
LAYOUT_REWRITE_ANNOTATION = "meta_schedule.layout_rewrite_preproc"
FEATURE_NAMES = OWN_FEATURES + ACCESS_NAMES
FEATURE_DIM = len(FEATURE_NAMES)


class UnsupportedProgramError(CdmppError, ValueError):
    """The program holds a construct the featurizer cannot represent (named in the message)."""


@dataclass
class ProgramAST:
    """The compact AST of one scheduled PrimFunc.

    ``N`` is the node count (root + loops + leaves), ``L`` the leaf count, ``F`` is
    :data:`FEATURE_DIM` (= 119).

    Attributes:
        node_parent: int32 ``(N,)``: pre-order index of each node's parent; -1 for the root.
        node_kind: int8 ``(N,)``: ``ROOT`` (-1), a loop kind ``SERIAL`` (0) ... ``THREAD_BINDING``
            (4), or ``LEAF`` (5).
        node_extent: int64 ``(N,)``: loop extent; -1 when symbolic; 0 for the root and leaves.
        node_name: loop variable name, buffer name of a leaf, or the function name for the root.
        node_annotations: per node, the loop's annotations (and thread tag) as strings.
        leaf_position: int32 ``(L,)``: each leaf's pre-order index, i.e. its node index.
        leaf_features: float32 ``(L, F)``: the leaf feature vectors (see module docstring).
        leaf_buffer: the buffer each leaf stores to.
        psf: float32 ``(R, 164)``: TVM's ``PerStoreFeature`` rows of the program, one per
            written buffer (``None`` unless extracted: ``featurize_many(..., psf=True)``).
        dropped_leaves: stores of weight-layout-rewrite blocks (TVM's ``PerStoreFeature``
            removes them first, ``RemoveWeightLayoutRewriteBlock``).
    """

    node_parent: np.ndarray
    node_kind: np.ndarray
    node_extent: np.ndarray
    node_name: tuple[str, ...]
    node_annotations: tuple[dict, ...]
    leaf_position: np.ndarray
    leaf_features: np.ndarray
    leaf_buffer: tuple[str, ...]
    psf: np.ndarray | None = None
    dropped_leaves: int = 0

    @property
    def num_leaves(self) -> int:
        """``L``."""
        return int(self.leaf_position.shape[0])


def _log(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


class _Builder:
    def __init__(self):
        self.parent: list[int] = []
        self.kind: list[int] = []
        self.extent: list[int] = []
        self.name: list[str] = []
        self.ann: list[dict] = []
        self.leaves: list[tuple[int, object, list[int], bool, ExprStats]] = []  # node, store, path, is_init, ops
        self.dropped = 0  # stores of weight-layout-rewrite blocks
        self._in_rewrite = False
        self.access = AccessState()
        self.access_rows: list[np.ndarray] = []

    def add(self, parent: int, kind: int, extent: int, name: str, ann: dict) -> int:
        self.parent.append(parent)
        self.kind.append(kind)
        self.extent.append(extent)
        self.name.append(name)
        self.ann.append(ann)
        return len(self.parent) - 1

    def visit(self, s, parent: int, path: list[int], in_init: bool) -> None:
        # pylint: disable=too-many-branches
        name = type(s).__name__
        if name == "For":
            ext = s.extent
            extent = int(ext.value) if type(ext).__name__ == "IntImm" else -1
            if extent == 1:
                self.access.fix_loop(s)
                self.visit(s.body, parent, path, in_init)
                return
            kind = int(s.kind)
            ann = {str(k): str(v) for k, v in s.annotations.items()}
            if s.thread_binding is not None:
                ann["thread_tag"] = str(s.thread_binding.thread_tag)
            node = self.add(parent, kind, extent, str(s.loop_var.name), ann)
            if extent > 1:
                self.access.enter_loop(s, extent)
                self.visit(s.body, node, path + [node], in_init)
                self.access.exit_loop(s)
            else:  # symbolic extent: the access features take the loop at its min
                self.access.fix_loop(s)
                self.visit(s.body, node, path + [node], in_init)
        elif name == "SeqStmt":
            for sub in s.seq[:]:  # a slice converts the FFI array in one go
                self.visit(sub, parent, path, in_init)
        elif name == "BufferStore":
            node = self.add(parent, LEAF, 0, str(s.buffer.name), {})
            if self._in_rewrite:
                self.dropped += 1
            st = ExprStats()
            self.access_rows.append(self.access.features(s, st))
            self.leaves.append((node, s, path, in_init, st))
        elif name == "SBlockRealize":
            saved = self.access.enter_block(s)
            self.visit(s.block, parent, path, in_init)
            self.access.exit_block(saved)
        elif name == "SBlock":
            outer = self._in_rewrite
            self._in_rewrite = outer or LAYOUT_REWRITE_ANNOTATION in s.annotations
            if s.init is not None:
                self.visit(s.init, parent, path, True)
            self.visit(s.body, parent, path, in_init)
            self._in_rewrite = outer
        elif name == "IfThenElse":
            self.visit(s.then_case, parent, path, in_init)
            if s.else_case is not None:
                self.visit(s.else_case, parent, path, in_init)
        elif name in ("AttrStmt", "LetStmt", "Bind", "AllocBuffer", "DeclBuffer", "AssertStmt", "Allocate"):
            body = getattr(s, "body", None)
            if body is not None:
                self.visit(body, parent, path, in_init)
        elif name in ("Evaluate",):
            return
        else:
            raise UnsupportedProgramError(f"unsupported TensorIR construct {name!r} in the program body")


def single_func(program):
    """The PrimFunc of a PrimFunc, a Schedule or a one-function IRModule."""
    from cdmpp.tvm_compat import IRModule, PrimFunc, Schedule  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if isinstance(program, Schedule):
        program = program.mod
    if isinstance(program, PrimFunc):
        return program
    if isinstance(program, IRModule):
        funcs = [f for _, f in program.functions.items() if isinstance(f, PrimFunc)]
        if len(funcs) != 1:
            raise UnsupportedProgramError(
                f"expected an IRModule with exactly one PrimFunc, got {len(funcs)} PrimFuncs"
            )
        return funcs[0]
    raise UnsupportedProgramError(
        f"expected a scheduled PrimFunc, IRModule, Schedule or TuningRecord, got {type(program).__name__}"
    )


def build_tree(program, psf_rows: np.ndarray | None = None, compiled: bool = True) -> ProgramAST:
    """The compact AST of a scheduled PrimFunc (or one-PrimFunc IRModule / Schedule).

    Args:
        program: the scheduled program.
        psf_rows: float32 ``(R, 164)`` TVM ``PerStoreFeature`` rows of the same program
            to keep in ``ProgramAST.psf`` (``None``: not extracted).
        compiled: walk it with the compiled walk (:mod:`cdmpp.featurize.compiled`) when it is
            built; ``False``: the Python walk of this module, the reference (same values).

    Raises:
        UnsupportedProgramError: not a PrimFunc, an IRModule with other than one
            PrimFunc, a construct such as ``While``, or no ``BufferStore`` at all.
    """
    func = single_func(program)
    root = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
    walk = compiled_walk() if compiled else None
    if walk is not None:
        out = unpack(walk(func), FEATURE_DIM)
        if not isinstance(out, str):
            return _from_compiled(out, root, psf_rows)
        if out.startswith("E"):
            raise UnsupportedProgramError(out[1:])
        # "F": a case the compiled walk leaves to the Python walk
    return _python_tree(func, root, psf_rows)


def _psf(psf_rows: np.ndarray | None) -> np.ndarray | None:
    return None if psf_rows is None else np.asarray(psf_rows, dtype=np.float32).reshape(-1, PSF_DIM)


def _from_compiled(out: tuple, root: str, psf_rows: np.ndarray | None) -> ProgramAST:
    parent, kind, extent, ann_count, position, features, strings, dropped = out
    n, leaves = len(parent), len(position)
    names = strings[:n]
    names[0] = root
    pairs = iter(strings[n + leaves :])
    annotations = tuple({next(pairs): next(pairs) for _ in range(c)} if c else {} for c in ann_count.tolist())
    return ProgramAST(
        node_parent=parent.astype(np.int32),
        node_kind=kind.astype(np.int8),
        node_extent=extent.copy(),
        node_name=tuple(names),
        node_annotations=annotations,
        leaf_position=position.astype(np.int32),
        leaf_features=features.copy(),
        leaf_buffer=tuple(strings[n : n + leaves]),
        psf=_psf(psf_rows),
        dropped_leaves=dropped,
    )


def _python_tree(func, root: str, psf_rows: np.ndarray | None) -> ProgramAST:
    # pylint: disable=too-many-locals
    b = _Builder()
    b.add(-1, ROOT, 0, root, {})
    b.visit(func.body, 0, [], False)
    if not b.leaves:
        raise UnsupportedProgramError("the program has no BufferStore statement (nothing to featurize)")

    extents = np.asarray(b.extent, dtype=np.int64)
    kinds = np.asarray(b.kind, dtype=np.int8)
    n_loops = int(np.sum((kinds >= 0) & (kinds != LEAF)))
    own = np.zeros((len(b.leaves), len(OWN_FEATURES)), dtype=np.float64)
    for i, (node, store, path, in_init, st) in enumerate(b.leaves):
        per_kind = [1.0] * 5
        unroll = 0
        for p in path:
            e = max(int(b.extent[p]), 1)
            per_kind[b.kind[p]] *= e
            unroll = max(unroll, int(b.ann[p].get("pragma_auto_unroll_max_step", 0) or 0))
        iters = math.prod(per_kind)
        inner = path[-1] if path else -1
        dtype = store.buffer.dtype
        shape_elems = math.prod(int(d) for d in b.access.buffer_info(store.buffer)[0])
        buf = str(store.buffer.name)
        row = [
            len(path),
            *(math.log2(k) for k in per_kind),  # 0 when no loop of that kind
            _log(iters),
            _log(max(int(b.extent[inner]), 0)) if inner >= 0 else 0.0,
            *((1.0 if inner >= 0 and b.kind[inner] == k else 0.0) for k in range(5)),
            _log(st.loads),
            _log(st.add_sub),
            _log(st.mul),
            _log(st.div_mod),
            _log(st.max_min),
            _log(st.calls),
            _log(st.select_cmp),
            _log(st.casts),
            1.0 if in_init else 0.0,
            float(dtype.bits),
            float(getattr(dtype, "lanes", 1)),
            _log(shape_elems),
            1.0 if buf in st.buffers_read else 0.0,
            _log(unroll),
            _log(len(b.leaves)),
            _log(n_loops),
        ]
        own[i] = row
    leaves = np.asarray([leaf[0] for leaf in b.leaves], dtype=np.int32)
    return ProgramAST(
        node_parent=np.asarray(b.parent, dtype=np.int32),
        node_kind=kinds,
        node_extent=extents,
        node_name=tuple(b.name),
        node_annotations=tuple(b.ann),
        leaf_position=leaves,
        leaf_features=np.concatenate([own.astype(np.float32), np.stack(b.access_rows)], axis=1),
        leaf_buffer=tuple(str(leaf[1].buffer.name) for leaf in b.leaves),
        psf=_psf(psf_rows),
        dropped_leaves=b.dropped,
    )


def access_features(program) -> np.ndarray:
    """The buffer-access features of every leaf of a scheduled program.

    Args:
        program: a scheduled PrimFunc, a one-PrimFunc IRModule or a Schedule.

    Returns:
        float32 ``(L, 90)``, one row per leaf in the compact AST's leaf order: the layout
        of ``PerStoreFeature``'s columns 57-146 (:mod:`cdmpp.featurize.access`), the same values as
        the leaves' columns :data:`~cdmpp.featurize.access.ACCESS_NAMES` of :func:`build_tree`.

    Raises:
        UnsupportedProgramError: a construct the walk does not know.
    """
    return np.ascontiguousarray(build_tree(program).leaf_features[:, len(OWN_FEATURES):])
