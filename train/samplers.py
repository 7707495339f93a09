"""Batch samplers of training: groups of one task's programs (for the ranking terms), and pools
of programs of similar token count (less padding)."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler


class IndexDataset(Dataset):
    """The positions ``index`` of a featurized set as a dataset of ints (the collate functions
    gather the programs)."""

    def __init__(self, index: np.ndarray):
        self.index = np.asarray(index, dtype=np.int64)

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        return int(self.index[i])


class TaskGroupBatchSampler(Sampler):
    """Batches of whole groups of same-task programs, for a within-task ranking loss.

    Each epoch, the programs of every task are shuffled and cut into groups of up to
    ``group`` programs; the groups are shuffled, laid end to end and cut into batches
    of ``batch_size`` programs (the last may be shorter), so the batch count is fixed.
    Every program appears exactly once per epoch.  Deterministic given ``seed``.

    Args:
        index: int64 ``(N,)`` program indices.
        workload: int64 ``(N,)`` task (workload) of each of them.
    """

    def __init__(self, index: np.ndarray, workload: np.ndarray, batch_size: int, group: int, seed: int = 0):
        super().__init__()
        self.index, self.workload = np.asarray(index, np.int64), np.asarray(workload, np.int64)
        self.batch_size, self.group = max(1, batch_size), max(1, group)
        self.rng = np.random.default_rng(seed)

    def _batches(self) -> list[list[int]]:
        groups = []
        for w in np.unique(self.workload):
            members = self.rng.permutation(self.index[self.workload == w])
            groups += [members[i : i + self.group] for i in range(0, len(members), self.group)]
        order = np.concatenate([groups[g] for g in self.rng.permutation(len(groups))]) if groups else self.index
        return [order[i : i + self.batch_size].tolist() for i in range(0, len(order), self.batch_size)]

    def __iter__(self):
        return iter(self._batches())

    def __len__(self) -> int:
        return -(-len(self.index) // self.batch_size)


class LengthPoolBatchSampler(Sampler[list[int]]):
    """Training batches of programs of similar token count, so that a batch pads less.

    Each epoch shuffles ``index``, cuts the order into pools of ``pool`` batches, sorts
    each pool by token count (stable), cuts it into batches of ``batch_size`` programs and
    yields the batches in shuffled order: the bucketing by length of sequence-model
    trainers (for example fairseq's and torchtext's ``BucketIterator``), kept local to a
    pool so that a batch still mixes tasks.  Every program appears exactly once per
    epoch.  The draws come from ``generator``, so that a resumed run continues them.

    Args:
        index: int64 ``(N,)`` program indices.
        lengths: int64 ``(N,)`` token count of each of them.
        generator: the ``torch.Generator`` of the shuffles.
    """

    def __init__(self, index: np.ndarray, lengths: np.ndarray, batch_size: int, pool: int, generator: torch.Generator):
        super().__init__()
        self.index, self.lengths = np.asarray(index, np.int64), np.asarray(lengths, np.int64)
        self.batch_size, self.pool, self.generator = max(1, batch_size), max(1, pool), generator

    def __iter__(self):
        perm = torch.randperm(len(self.index), generator=self.generator).numpy()
        batches = []
        size = self.batch_size * self.pool
        for start in range(0, len(perm), size):
            chunk = perm[start : start + size]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [self.index[chunk[i : i + self.batch_size]] for i in range(0, len(chunk), self.batch_size)]
        for b in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[b].tolist()

    def __len__(self) -> int:
        size = self.batch_size * self.pool
        full, rest = divmod(len(self.index), size)
        return full * self.pool + -(-rest // self.batch_size)
