"""Buffer-access leaf features computed from the loop nest, without TVM's lowering passes.

TVM MetaSchedule's ``PerStoreFeature`` (``src/meta_schedule/feature_extractor/
per_store_feature.cc``, group 2) describes, for each buffer store, the 5 buffers the
store touches most (by cache lines, then bytes) with 18 features each: access type
(read, write, read-write), bytes, unique bytes, cache lines, unique cache lines, reuse
type (loop-invariant read, serial read-write, none), reuse distance in iterations and
bytes, reuse count, the four sizes divided by the reuse count, and the innermost stride
(all sizes ``log2(1 + x)``).  An ablation (``cdmpp bench table --access-ablation``) shows that
this group carries what the transformer needs from ``PerStoreFeature``.

The compact-AST walk (:func:`cdmpp.featurize.ast.build_tree`) computes the same 90
columns for every leaf from the scheduled PrimFunc as it stands, in its one pass over
the statements (featurizer version 3; :func:`cdmpp.featurize.ast.access_features` returns them alone):
block iteration variables are replaced by their bindings, every buffer index becomes
an affine form of the enclosing loops, and the touched region under each loop is the
bounding box of the indices over the loops inside it.  It differs from TVM's in what TVM's lowering changes
or what an affine form cannot say:

* buffer shapes are the declared ones (TVM compacts intermediate buffers first);
* ``floordiv`` / ``floormod`` by a constant and other non-affine indices are
  approximated (a division scales the coefficients; a modulo keeps them);
* serial read-write reuse between *different* stores (TVM's reuse type 1) is not
  detected: each store is described on its own.
"""

from __future__ import annotations

import functools
import math
import re

import numpy as np

ACCESS_BUFFERS = 5
ACCESS_FEATURES_PER_BUFFER = 18
ACCESS_DIM = ACCESS_BUFFERS * ACCESS_FEATURES_PER_BUFFER
CACHE_LINE_BYTES = 64
_READ, _WRITE, _READ_WRITE = 0, 1, 2
_LOOP_READ, _NO_REUSE = 0, 2
ACCESS_FEATURE_NAMES = (
    "is_read", "is_write", "is_read_write", "bytes", "unique_bytes", "lines", "unique_lines",
    "reuse_loop_read", "reuse_serial_read_write", "reuse_none", "reuse_distance_iterations",
    "reuse_distance_bytes", "reuse_count", "bytes_per_reuse", "unique_bytes_per_reuse",
    "lines_per_reuse", "unique_lines_per_reuse", "innermost_stride",
)
"""The 18 features of one buffer, in ``PerStoreFeature``'s order (sizes ``log2(1 + x)``)."""
ACCESS_NAMES = tuple(f"access{b}_{n}" for b in range(ACCESS_BUFFERS) for n in ACCESS_FEATURE_NAMES)


class ExprStats:
    """Operation counts of a store's value expression (the compact AST's own features)."""

    __slots__ = ("loads", "add_sub", "mul", "div_mod", "max_min", "calls", "select_cmp", "casts", "buffers_read")

    def __init__(self):
        self.loads = self.add_sub = self.mul = self.div_mod = self.max_min = 0
        self.calls = self.select_cmp = self.casts = 0
        self.buffers_read: set[str] = set()


_ADD = {"Add", "Sub"}
_MUL = {"Mul"}
_DIV = {"Div", "FloorDiv", "FloorMod", "Mod"}
_MAXMIN = {"Max", "Min"}
_CMP = {"Select", "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or", "Not"}
_LEAF_EXPR = {"IntImm", "FloatImm", "StringImm", "Var", "SizeVar"}
_LOADS = {"BufferLoad", "TensorLoad"}  # TVM 0.27 calls it TensorLoad, its buffer ``source``
_SUB_EXPRS = ("a", "b", "value", "condition", "true_value", "false_value", "base", "stride")
_BINARY = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Max", "Min", "EQ", "NE", "LT", "LE", "GT", "GE",
           "And", "Or")
_CHILDREN = {**dict.fromkeys(_BINARY, ("a", "b")), "Not": ("a",), "Cast": ("value",), "Broadcast": ("value",),
             "Select": ("condition", "true_value", "false_value"), "Ramp": ("base", "stride")}
"""The operand attributes of the common expression kinds (each an expression); other kinds
are searched for every name of ``_SUB_EXPRS``."""


@functools.lru_cache(maxsize=64)
def _dtype_bytes(dtype: str) -> int:
    """Bytes per element of a dtype string such as ``float32`` or ``int8x4``."""
    m = re.match(r"[a-z]+?(\d+)?(?:x(\d+))?$", dtype)
    if m is None:
        return 4
    bits = int(m.group(1) or 8)
    lanes = int(m.group(2) or 1)
    return max(1, bits * lanes // 8)


_NO_LOOPS: dict = {}
_UNKNOWN: tuple[dict, float] = (_NO_LOOPS, 0.0)


class AccessState:
    """The loop nest around the walk's current statement; :meth:`features` of a store under it.

    The compact-AST walk calls the ``enter_*`` / ``exit_*`` hooks as it goes down and up."""

    def __init__(self):
        self.extents: list[float] = []  # extents of the loops of extent > 1, outer to inner
        self.loop_pos: dict[int, tuple[int, float]] = {}  # loop var -> (position, min)
        self.fixed: dict[int, float] = {}  # loop vars of extent-1 loops -> their value
        self.env: dict[int, tuple[dict, float]] = {}  # block iteration var -> affine form
        self._buffers: dict[int, tuple] = {}

    # affine forms: ({loop position: coefficient}, constant)
    def lin(self, e) -> tuple[dict, float]:
        """The affine form of an index expression; the forms returned are shared, never changed."""
        # pylint: disable=too-many-return-statements
        name = type(e).__name__
        if name == "Var" or name == "SizeVar":  # noqa: PLR1714  (the most frequent case first)
            h = e.__chandle__()
            at = self.loop_pos.get(h)
            if at is not None:
                return {at[0]: 1.0}, at[1]
            fixed = self.fixed.get(h)
            if fixed is not None:
                return _NO_LOOPS, fixed
            return self.env.get(h, _UNKNOWN)
        if name == "IntImm":
            return _NO_LOOPS, float(e.value)
        if name == "Add" or name == "Sub":  # noqa: PLR1714
            (ca, ka), (cb, kb) = self.lin(e.a), self.lin(e.b)
            if name == "Add":
                if not cb:
                    return ca, ka + kb
                out = dict(ca)
                for p, c in cb.items():
                    out[p] = out.get(p, 0.0) + c
                return out, ka + kb
            out = dict(ca)
            for p, c in cb.items():
                out[p] = out.get(p, 0.0) - c
            return out, ka - kb
        if name == "Mul":
            (ca, ka), (cb, kb) = self.lin(e.a), self.lin(e.b)
            if not ca:
                return {p: c * ka for p, c in cb.items()}, ka * kb
            if not cb:
                return {p: c * kb for p, c in ca.items()}, ka * kb
            return {**ca, **cb}, ka * kb  # not affine: keep which loops it depends on
        if name in ("FloorDiv", "Div"):
            (ca, ka), (cb, kb) = self.lin(e.a), self.lin(e.b)
            if not cb and kb:
                return {p: c / kb for p, c in ca.items()}, ka // kb
            return ca, ka
        if name in ("FloorMod", "Mod", "Min", "Max"):
            return self.lin(e.a)
        if name == "Cast":
            return self.lin(e.value)
        return _UNKNOWN  # a gathered index, a call: unknown, taken as constant

    def enter_loop(self, loop, extent: int) -> None:
        """A ``For`` of constant ``extent`` > 1 (any other loop: :meth:`fix_loop`)."""
        lo = float(loop.min.value) if type(loop.min).__name__ == "IntImm" else 0.0
        self.loop_pos[loop.loop_var.__chandle__()] = (len(self.extents), lo)
        self.extents.append(float(extent))

    def exit_loop(self, loop) -> None:
        self.extents.pop()
        del self.loop_pos[loop.loop_var.__chandle__()]

    def fix_loop(self, loop) -> None:
        """A ``For`` of extent 1 (or a symbolic one): its variable is its ``min``."""
        lo = float(loop.min.value) if type(loop.min).__name__ == "IntImm" else 0.0
        self.fixed[loop.loop_var.__chandle__()] = lo

    def enter_block(self, realize) -> dict:
        """Bind an ``SBlockRealize``'s iteration variables; returns what :meth:`exit_block` restores."""
        saved = self.env
        self.env = dict(saved)
        for iv, value in zip(realize.block.iter_vars[:], realize.iter_values[:]):
            self.env[iv.var.__chandle__()] = self.lin(value)
        return saved

    def exit_block(self, saved: dict) -> None:
        self.env = saved

    def _accesses(self, store, st: ExprStats) -> dict:
        """``{buffer handle: [buffer, access type, [indices, ...]]}`` as TVM's ``Init``; counts
        the value expression's operations into ``st`` in the same pass."""
        acc = {store.buffer.__chandle__(): [store.buffer, _WRITE, [store.indices[:]]]}
        stack = [store.value]
        while stack:
            e = stack.pop()
            name = type(e).__name__
            if name in _LEAF_EXPR:
                continue
            if name in _LOADS:
                buf = e.buffer if hasattr(e, "buffer") else e.source
                st.loads += 1
                st.buffers_read.add(str(buf.name))
                h = buf.__chandle__()
                entry = acc.get(h)
                if entry is None:
                    acc[h] = entry = [buf, _READ, []]
                elif entry[1] == _WRITE:
                    entry[1] = _READ_WRITE
                indices = e.indices[:]  # a slice converts the FFI array in one go
                if entry[1] != _READ_WRITE:
                    entry[2].append(indices)
                stack.extend(indices)
                continue
            if name == "Call":
                op = str(getattr(e.op, "name", e.op))
                if op.endswith("if_then_else"):
                    st.select_cmp += 1
                else:
                    st.calls += 1
                stack.extend(e.args[:])
                continue
            if name in _ADD:
                st.add_sub += 1
            elif name in _MUL:
                st.mul += 1
            elif name in _DIV:
                st.div_mod += 1
            elif name in _MAXMIN:
                st.max_min += 1
            elif name in _CMP:
                st.select_cmp += 1
            elif name == "Cast":
                st.casts += 1
            attrs = _CHILDREN.get(name)
            if attrs is None:  # another expression kind: look for every operand name
                attrs = _SUB_EXPRS
                for attr in attrs:
                    sub = getattr(e, attr, None)
                    if sub is not None and not isinstance(sub, (int, float, str)):
                        stack.append(sub)
                continue
            for attr in attrs:
                stack.append(getattr(e, attr))
        return acc

    def buffer_info(self, buf) -> tuple[list[float], int, list[float]]:
        """``(shape, bytes per element, row-major stride of each dimension)``, cached per buffer."""
        h = buf.__chandle__()
        info = self._buffers.get(h)
        if info is None:
            shape = [float(d.value) if type(d).__name__ == "IntImm" else 1.0 for d in buf.shape[:]]
            strides = [1.0] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            info = self._buffers[h] = (shape, _dtype_bytes(str(buf.dtype)), strides)
        return info

    def features(self, store, st: ExprStats) -> np.ndarray:
        """float32 ``(90,)``: the buffer-access features of ``store`` under the current loop
        nest; counts its value expression's operations into ``st``."""
        # pylint: disable=too-many-locals,too-many-branches,too-many-statements
        ext = self.extents
        n = len(ext)
        inner_prod = [1.0] * (n + 1)  # inner_prod[j]: product of the extents of loops j.. inside
        for j in range(n - 1, -1, -1):
            inner_prod[j] = inner_prod[j + 1] * ext[j]
        prod = inner_prod[0]
        lin = self.lin
        subs = []
        for buf, kind, multi in self._accesses(store, st).values():
            shape, nbytes, dim_stride = self.buffer_info(buf)
            ndim = len(shape)
            if len(multi) == 1:
                numel, size0, by_loop = _one_access([lin(e) for e in multi[0][:ndim]], shape, ext)
            else:
                numel, size0, by_loop = _many_accesses([[lin(e) for e in idx[:ndim]] for idx in multi], shape, ext)
            # the innermost loop the indices depend on, and the smallest stride it moves them by
            inner = max(by_loop) if by_loop else -1
            min_stride = min(abs(c) * dim_stride[d] for d, c in by_loop[inner]) if inner >= 0 else 0.0
            continuous = 1.0
            for d in range(ndim - 1, -1, -1):
                if size0[d] == shape[d]:
                    continuous = shape[d] * nbytes
                    break
            subs.append((buf, kind, nbytes, numel, by_loop, min_stride, min_stride if inner == n - 1 else 0.0,
                         inner_prod[inner + 1], continuous))
        top_touch = float(sum(sub[2] for sub in subs))
        rows = []
        log2 = math.log2
        for buf, kind, nbytes, numel, region, min_stride, innermost_stride, prod_non_strided, continuous in subs:
            reuse_type, reuse_iter, reuse_bytes, reuse_ct = _NO_REUSE, 0.0, 0.0, 0.0
            for i in range(n - 1, -1, -1):
                if i not in region:
                    reuse_type, reuse_ct, reuse_iter = _LOOP_READ, ext[i], inner_prod[i + 1]
                    reuse_bytes = top_touch if i == n - 1 else sum(sub[3][i + 1] * sub[2] for sub in subs)
                    break
            size = nbytes * prod
            if n:
                unique = numel[0] * nbytes
                lines = max(1.0, prod / prod_non_strided * min(1.0, min_stride * nbytes / CACHE_LINE_BYTES))
                unique_lines = max(1.0, unique / min(CACHE_LINE_BYTES, continuous))
            else:
                unique = lines = unique_lines = 1.0
            proxy = reuse_ct if reuse_ct > 0 else 0.5
            rows.append((lines, size, str(buf.name), (
                float(kind == _READ), float(kind == _WRITE), float(kind == _READ_WRITE),
                log2(1.0 + abs(size)), log2(1.0 + abs(unique)), log2(1.0 + abs(lines)), log2(1.0 + abs(unique_lines)),
                float(reuse_type == _LOOP_READ), 0.0, float(reuse_type == _NO_REUSE),
                log2(1.0 + abs(reuse_iter)), log2(1.0 + abs(reuse_bytes)), log2(1.0 + abs(reuse_ct)),
                log2(1.0 + abs(size / proxy)), log2(1.0 + abs(unique / proxy)), log2(1.0 + abs(lines / proxy)),
                log2(1.0 + abs(unique_lines / proxy)),
                log2(1.0 + abs(innermost_stride)),
            )))
        rows.sort(key=lambda r: (-r[0], -r[1], r[2]))
        flat = [v for r in rows[:ACCESS_BUFFERS] for v in r[3]]
        out = np.zeros(ACCESS_DIM, dtype=np.float32)
        out[:len(flat)] = flat
        return out


def _one_access(form: list, shape: list[float], ext: list[float]) -> tuple[list[float], list[float], dict]:
    """The region one index list (``form``: an affine form per dimension) touches under the
    loops ``ext`` (outer to inner): ``(numel, size0, by_loop)``, ``numel[i]`` the elements
    touched while loops ``i..`` vary, ``size0`` the region's size per dimension under all of
    them, ``by_loop`` ``{loop: [(dimension, coefficient), ...]}`` of the loops it depends on."""
    n = len(ext)
    hi = [f[1] for f in form]
    lo = list(hi)
    by_loop: dict[int, list] = {}
    for d, (coefs, _) in enumerate(form):
        for p, c in coefs.items():
            if c and p < n:
                entries = by_loop.get(p)
                if entries is None:
                    by_loop[p] = [(d, c)]
                else:
                    entries.append((d, c))
    # the index's range when loops i.. vary: grow from the innermost loop out
    sizes = [min(max(h - w + 1.0, 1.0), sh) for h, w, sh in zip(hi, lo, shape)]
    total = math.prod(sizes)
    numel = [1.0] * n
    for i in range(n - 1, -1, -1):
        entries = by_loop.get(i)
        if entries:  # only the dimensions this loop indexes change
            span = ext[i] - 1
            for d, c in entries:
                if c > 0:
                    hi[d] += c * span
                else:
                    lo[d] += c * span
                sizes[d] = min(max(hi[d] - lo[d] + 1.0, 1.0), shape[d])
            total = math.prod(sizes)
        numel[i] = total
    return numel, (sizes if n else [1.0] * len(shape)), by_loop


def _many_accesses(forms: list[list], shape: list[float], ext: list[float]) -> tuple[list[float], list[float], dict]:
    """:func:`_one_access` of the union of several index lists of one buffer."""
    n, ndim = len(ext), len(shape)
    up = [[f[1] for f in idx] for idx in forms]
    down = [[f[1] for f in idx] for idx in forms]
    by_k: dict[int, list] = {}
    for k, idx in enumerate(forms):
        for d, (coefs, _) in enumerate(idx):
            for p, c in coefs.items():
                if c and p < n:
                    by_k.setdefault(p, []).append((k, d, c))

    def extent_of(d: int) -> float:
        hi = max(u[d] for u in up)
        lo = min(w[d] for w in down)
        return min(max(hi - lo + 1.0, 1.0), shape[d])

    sizes = [extent_of(d) for d in range(ndim)]
    total = math.prod(sizes)
    numel = [1.0] * n
    for i in range(n - 1, -1, -1):
        entries = by_k.get(i)
        if entries:
            span = ext[i] - 1
            for k, d, c in entries:
                if c > 0:
                    up[k][d] += c * span
                else:
                    down[k][d] += c * span
            for d in {d for _, d, _ in entries}:
                sizes[d] = extent_of(d)
            total = math.prod(sizes)
        numel[i] = total
    by_loop = {p: [(d, c) for _, d, c in entries] for p, entries in by_k.items()}
    return numel, (sizes if n else [1.0] * ndim), by_loop
