"""Featurized datasets: ragged leaf sequences flattened into one array plus pointers.

Like PyTorch Geometric's ``Batch``, the leaves of ``P`` programs are stacked into one
``(sum L_i, F)`` array, and ``ptr`` (``(P + 1,)``) marks where each program starts.
:func:`dense` pads them into ``(B, L_max, F)`` tensors with a mask, as PyG's
``to_dense_batch`` does.  cdmpp does not depend on PyG: one padding function is all the
model needs, and PyG's import (about 2.5 s) would land on the prediction path.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.errors import InputError

from .ast import FEATURE_DIM, FEATURIZER_VERSION, PSF_DIM, ProgramAST
from .loops import LOOP_DIM, stack_loops


@dataclass
class FeaturizedPrograms:
    """Featurized programs of one device database, with labels and grouping.

    ``P`` programs with ``L_i`` leaves each; ``F = FEATURE_DIM``.

    Attributes:
        x: float32 ``(sum L_i, F)``: leaf features of all programs, program after program.
        pos: int32 ``(sum L_i,)``: each leaf's pre-order position in its tree.
        ptr: int64 ``(P + 1,)``: program ``i`` owns rows ``ptr[i]:ptr[i+1]``.
        latency: float64 ``(P,)``: measured latency (median of repeats) in seconds.
        workload: int64 ``(P,)``: index into ``workload_keys``.
        workload_keys: the workloads' structural-hash strings.
        flops: float64 ``(P,)``: FLOPs of the program's workload (0 when unknown).
        psf: float32 ``(sum R_i, 164)``: TVM's ``PerStoreFeature`` rows, one per written
            buffer, program after program (the baselines' input; ``None`` when the
            programs were featurized without them, as on the prediction path).
        psf_ptr: int64 ``(P + 1,)``: program ``i`` owns ``psf`` rows ``psf_ptr[i]:psf_ptr[i+1]``
            (``None`` with ``psf``).
        device_row: int64 ``(P,)``: each program's row in a model's device table (see
            :class:`cdmpp.model.LatencyTransformer`), or ``None`` for programs
            of one device (a single device folder).  Not saved by :meth:`save`.
        loop_x: float32 ``(sum K_i, LOOP_DIM)``: the loop tokens of every program
            (:func:`cdmpp.featurize.loops.loop_rows`), program after program; ``None``
            when featurized without them (an older cache entry).
        loop_pos: int32 ``(sum K_i,)``: each loop's pre-order position (``None`` with ``loop_x``).
        loop_ptr: int64 ``(P + 1,)``: program ``i`` owns loop rows ``loop_ptr[i]:loop_ptr[i+1]``.
    """

    x: np.ndarray
    pos: np.ndarray
    ptr: np.ndarray
    latency: np.ndarray
    workload: np.ndarray
    workload_keys: list[str]
    flops: np.ndarray
    psf: np.ndarray | None = None
    psf_ptr: np.ndarray | None = None
    device_row: np.ndarray | None = None
    loop_x: np.ndarray | None = None
    loop_pos: np.ndarray | None = None
    loop_ptr: np.ndarray | None = None

    @property
    def has_loops(self) -> bool:
        """Whether the loop tokens are kept (``loop_x``, ``loop_pos``, ``loop_ptr``)."""
        return self.loop_x is not None and self.loop_pos is not None and self.loop_ptr is not None

    def __len__(self) -> int:
        return int(self.ptr.shape[0] - 1)

    @property
    def psf_sum(self) -> np.ndarray:
        """float32 ``(P, 164)``: each program's ``PerStoreFeature`` rows summed (the input
        of the gradient-boosted-tree baseline, as TVM's XGBModel sums them).

        Raises:
            InputError: the programs were featurized without ``PerStoreFeature``.
        """
        psf, ptr = self._psf()
        cum = np.concatenate([np.zeros((1, PSF_DIM)), np.cumsum(psf, axis=0, dtype=np.float64)])
        return (cum[ptr[1:]] - cum[ptr[:-1]]).astype(np.float32)

    def _psf(self) -> tuple[np.ndarray, np.ndarray]:
        if self.psf is None or self.psf_ptr is None:
            raise InputError(
                "these programs were featurized without TVM's PerStoreFeature rows "
                "(featurize_many(..., psf=True) extracts them)"
            )
        return self.psf, self.psf_ptr

    def psf_rows(self, i: int) -> np.ndarray:
        """float32 ``(R_i, 164)``: program ``i``'s ``PerStoreFeature`` rows.

        Raises:
            InputError: as :attr:`psf_sum`.
        """
        psf, ptr = self._psf()
        return psf[ptr[i] : ptr[i + 1]]

    def leaves(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(x_i, pos_i)`` of program ``i``: ``(L_i, F)`` float32 and ``(L_i,)`` int32."""
        a, b = int(self.ptr[i]), int(self.ptr[i + 1])
        return self.x[a:b], self.pos[a:b]

    def subset(self, index: np.ndarray) -> "FeaturizedPrograms":
        """The programs at ``index`` (int array), in that order."""
        index = np.asarray(index, dtype=np.int64)
        rows, ptr = _gather(self.ptr, index)
        psf = psf_ptr = None
        if self.psf is not None and self.psf_ptr is not None:
            psf_rows, psf_ptr = _gather(self.psf_ptr, index)
            psf = self.psf[psf_rows]
        loops = {}
        if self.has_loops:
            loop_rows, loop_ptr = _gather(self.loop_ptr, index)
            loops = {"loop_x": self.loop_x[loop_rows], "loop_pos": self.loop_pos[loop_rows], "loop_ptr": loop_ptr}
        return FeaturizedPrograms(
            x=self.x[rows],
            pos=self.pos[rows],
            ptr=ptr,
            latency=self.latency[index],
            workload=self.workload[index],
            workload_keys=self.workload_keys,
            flops=self.flops[index],
            psf=psf,
            psf_ptr=psf_ptr,
            device_row=None if self.device_row is None else self.device_row[index],
            **loops,
        )

    @staticmethod
    def concat(parts: list["FeaturizedPrograms"]) -> "FeaturizedPrograms":
        """The programs of ``parts`` one after the other (for example two devices' programs).

        Program ``i`` of ``parts[k]`` becomes program ``sum(len(parts[:k])) + i``.
        ``workload_keys`` is the union of the parts' keys in order of first appearance,
        and each program's ``workload`` is remapped into it, so a workload measured on
        two devices keeps one index.

        ``device_row`` is kept when every part has one, and ``psf`` and the loop tokens when
        every part has them (``None`` otherwise).

        Raises:
            ValueError: no part.
        """
        if not parts:
            raise InputError("concat needs at least one FeaturizedPrograms")
        with_device = all(p.device_row is not None for p in parts)
        with_psf = all(p.psf is not None and p.psf_ptr is not None for p in parts)
        with_loops = all(p.has_loops for p in parts)
        keys: list[str] = []
        index_of: dict[str, int] = {}
        for p in parts:
            for k in p.workload_keys:
                if k not in index_of:
                    index_of[k] = len(keys)
                    keys.append(k)
        workload = [np.asarray([index_of[k] for k in p.workload_keys], np.int64)[p.workload] for p in parts]
        lens = np.concatenate([np.diff(p.ptr) for p in parts])
        return FeaturizedPrograms(
            x=np.concatenate([p.x for p in parts]),
            pos=np.concatenate([p.pos for p in parts]),
            ptr=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
            latency=np.concatenate([p.latency for p in parts]),
            workload=np.concatenate(workload).astype(np.int64),
            workload_keys=keys,
            flops=np.concatenate([p.flops for p in parts]),
            psf=np.concatenate([p.psf for p in parts]) if with_psf else None,
            psf_ptr=np.concatenate([[0], np.cumsum(np.concatenate([np.diff(p.psf_ptr) for p in parts]))]).astype(
                np.int64
            )
            if with_psf
            else None,
            device_row=np.concatenate([p.device_row for p in parts]).astype(np.int64) if with_device else None,
            **(_concat_loops(parts) if with_loops else {}),
        )

    def save(self, path: Path) -> None:
        """Write to an ``.npz`` file (no pickle), through a temporary file and a rename, so
        that a process killed while writing leaves no partial file behind."""
        psf = {} if self.psf is None or self.psf_ptr is None else {"psf": self.psf, "psf_ptr": self.psf_ptr}
        loops = ({"loop_x": self.loop_x, "loop_pos": self.loop_pos, "loop_ptr": self.loop_ptr,
                  "loop_dim": np.asarray(LOOP_DIM)} if self.has_loops else {})
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            self._write(f, loops, psf)
        os.replace(tmp, path)

    def _write(self, f, loops: dict, psf: dict) -> None:
        np.savez_compressed(
            f,
            **loops,
            x=self.x,
            pos=self.pos,
            ptr=self.ptr,
            latency=self.latency,
            workload=self.workload,
            workload_keys=np.asarray(self.workload_keys, dtype=np.str_),
            flops=self.flops,
            **psf,
            feature_dim=np.asarray(FEATURE_DIM),
            featurizer_version=np.asarray(FEATURIZER_VERSION),
        )

    @staticmethod
    def load(path: Path) -> "FeaturizedPrograms":
        """Read what :meth:`save` wrote.

        Raises:
            ValueError: the file is not a featurized-programs file of this feature layout.
        """
        try:
            with np.load(path, allow_pickle=False) as z:
                if int(z["feature_dim"]) != FEATURE_DIM:
                    raise ds.DatasetError(f"{path}: feature layout {int(z['feature_dim'])} != {FEATURE_DIM}")
                version = int(z["featurizer_version"]) if "featurizer_version" in z else 1
                if version != FEATURIZER_VERSION:
                    raise ds.DatasetError(f"{path}: featurizer version {version} != {FEATURIZER_VERSION}")
                return FeaturizedPrograms(
                    x=z["x"],
                    pos=z["pos"],
                    ptr=z["ptr"],
                    latency=z["latency"],
                    workload=z["workload"],
                    workload_keys=[str(k) for k in z["workload_keys"]],
                    flops=z["flops"],
                    psf=z["psf"] if "psf" in z else None,
                    psf_ptr=z["psf_ptr"] if "psf_ptr" in z else None,
                    **({"loop_x": z["loop_x"], "loop_pos": z["loop_pos"], "loop_ptr": z["loop_ptr"]}
                       if "loop_x" in z and int(z["loop_dim"]) == LOOP_DIM else {}),
                )
        except (OSError, KeyError, EOFError, zipfile.BadZipFile) as err:
            raise ds.DatasetError(f"corrupt featurized-programs file {path}: {err}") from err


def stack_leaves(trees: list[ProgramAST]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The leaves of ``P`` trees stacked: ``(x, pos, ptr)``, float32 ``(sum L_i, F)``, int32
    ``(sum L_i,)`` and int64 ``(P + 1,)`` (program ``i`` owns rows ``ptr[i]:ptr[i+1]``)."""
    if not trees:
        return np.zeros((0, FEATURE_DIM), np.float32), np.zeros(0, np.int32), np.zeros(1, np.int64)
    return (
        np.concatenate([t.leaf_features for t in trees]).astype(np.float32),
        np.concatenate([t.leaf_position for t in trees]).astype(np.int32),
        np.concatenate([[0], np.cumsum([t.num_leaves for t in trees])]).astype(np.int64),
    )


def from_trees(
    trees: list[ProgramAST], latency, workload, workload_keys: list[str], flops
) -> FeaturizedPrograms:
    """Stack trees (and their labels) into a :class:`FeaturizedPrograms` (with ``psf``
    when every tree carries its ``PerStoreFeature`` rows)."""
    x, pos, ptr = stack_leaves(trees)
    loop_x, loop_pos, loop_ptr = stack_loops(trees)
    psf = psf_ptr = None
    if all(t.psf is not None for t in trees):
        psf = np.concatenate([t.psf for t in trees] + [np.zeros((0, PSF_DIM), np.float32)]).astype(np.float32)
        psf_ptr = np.concatenate([[0], np.cumsum([len(t.psf) for t in trees])]).astype(np.int64)
    return FeaturizedPrograms(
        x=x,
        pos=pos,
        ptr=ptr,
        latency=np.asarray(latency, dtype=np.float64),
        workload=np.asarray(workload, dtype=np.int64),
        workload_keys=list(workload_keys),
        flops=np.asarray(flops, dtype=np.float64),
        psf=psf,
        psf_ptr=psf_ptr,
        loop_x=loop_x,
        loop_pos=loop_pos,
        loop_ptr=loop_ptr,
    )


def _concat_loops(parts: list[FeaturizedPrograms]) -> dict:
    """The loop tokens of ``parts`` one after the other (:meth:`FeaturizedPrograms.concat`)."""
    lens = np.concatenate([np.diff(p.loop_ptr) for p in parts])
    return {"loop_x": np.concatenate([p.loop_x for p in parts]),
            "loop_pos": np.concatenate([p.loop_pos for p in parts]),
            "loop_ptr": np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)}


def _gather(ptr: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, new ptr)``: the rows of the segments ``index`` of a pointer array, in that order."""
    lens = ptr[index + 1] - ptr[index]
    new_ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    rows = np.repeat(ptr[index] - new_ptr[:-1], lens) + np.arange(int(new_ptr[-1]))
    return rows.astype(np.int64), new_ptr


def dense(x: np.ndarray, pos: np.ndarray, ptr: np.ndarray):
    """Pad a flat ``(sum L_i, F)`` batch into torch tensors (torch only, no PyG: the inference path).

    Returns:
        ``(x, pos, mask)``: float32 ``(B, L_max, F)``, int64 ``(B, L_max)``, bool
        ``(B, L_max)`` (True on real leaves), padded as ``torch_geometric.utils.to_dense_batch`` pads
        (done here with two index assignments, so that prediction needs no PyG).
    """
    import torch  # noqa: PLC0415  (keeps torch off this module's import)

    lens = np.diff(np.asarray(ptr, dtype=np.int64))
    b, width = len(lens), int(lens.max()) if len(lens) else 0
    row = np.repeat(np.arange(b), lens)
    col = np.arange(int(lens.sum())) - np.repeat(np.asarray(ptr[:-1], dtype=np.int64), lens)
    xd = torch.zeros((b, width, x.shape[1]), dtype=torch.float32)
    pd = torch.zeros((b, width), dtype=torch.int64)
    mask = torch.zeros((b, width), dtype=torch.bool)
    xd[row, col] = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    pd[row, col] = torch.from_numpy(pos.astype(np.int64))
    mask[row, col] = True
    return xd, pd, mask


def dense_programs(data: FeaturizedPrograms, idx: np.ndarray):
    """:func:`dense` of the programs ``idx`` (int ``(B,)``) of ``data``, in that order."""
    idx = np.asarray(idx, dtype=np.int64)
    starts, ends = data.ptr[idx], data.ptr[idx + 1]
    rows = np.concatenate([np.arange(a, b) for a, b in zip(starts, ends)]) if len(idx) else np.zeros(0, np.int64)
    return dense(data.x[rows], data.pos[rows], np.concatenate([[0], np.cumsum(ends - starts)]))
