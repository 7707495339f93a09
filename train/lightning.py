"""Lightning wrappers: the loss/optimiser module and the data module.

:class:`LatencyModule` holds a :class:`~cdmpp.model.LatencyTransformer` and one
shared step (MSE on standardised log-latency, optionally plus a pairwise ranking term
within each task and a CMD domain-adaptation term); :class:`ProgramDataModule` serves
padded batches of a :class:`~cdmpp.featurize.batch.FeaturizedPrograms` split,
optionally built from groups of programs of one task so that the ranking term sees
pairs, and optionally with a batch of unlabelled target-domain programs for the CMD
term.
"""

from __future__ import annotations

import json
import time

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from cdmpp.errors import InputError
from cdmpp.featurize.batch import FeaturizedPrograms, dense_programs
from cdmpp.model import LatencyTransformer, ModelConfig

from .config import CMD_DOMAINS, TrainConfig, describe_loss, no_cmd_target  # noqa: F401  (re-exported)


def cmd_domain_programs(config: "TrainConfig", split) -> np.ndarray:
    """Indices of the CMD term's unlabelled programs under ``config.cmd_domain``.

    Returns ``split.val`` (int64, shape ``(n,)``) for ``"validation"``, else ``split.test``.
    """
    return split.val if config.cmd_domain == "validation" else split.test


class _Indices(Dataset):
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


class ProgramDataModule(L.LightningDataModule):
    """Batches of featurized programs for one split.

    Each batch is a dict: ``x`` float32 ``(B, L_max, F)``, ``pos`` int64 ``(B, L_max)``,
    ``mask`` bool ``(B, L_max)``, ``y`` float32 ``(B,)`` (natural log of seconds),
    ``index`` int64 ``(B,)`` (program indices into ``data``), ``workload`` int64
    ``(B,)`` (each program's task) and ``device_row`` int64 ``(B,)`` (each program's row
    in the model's device table; zeros when ``data.device_row`` is ``None``).  With
    ``task_group > 0`` the training batches are
    drawn by :class:`TaskGroupBatchSampler`; with ``length_pool > 0`` by
    :class:`LengthPoolBatchSampler`, and the validation programs go through sorted by
    token count.  With ``target`` (program indices of the
    target domain), every training batch also holds ``target_x``, ``target_pos`` and
    ``target_mask`` (same layout, ``B`` programs drawn uniformly from ``target``,
    seeded); the target programs' latencies are never read.  With ``level_weight``
    (float32 ``(P,)``, one weight per program of ``data``), every training batch also
    holds ``level_weight`` float32 ``(B,)``, the level loss's weight of each program.
    """

    def __init__(
        self,
        data: FeaturizedPrograms,
        train,
        val,
        test=None,
        batch_size: int = 128,
        seed: int = 0,
        task_group: int = 0,
        target=None,
        length_pool: int = 0,
        level_weight: np.ndarray | None = None,
    ):
        super().__init__()
        self.length_pool = length_pool
        self.level_weight = None if level_weight is None else np.asarray(level_weight, dtype=np.float32)
        self.data = data
        self.train_index, self.val_index = np.asarray(train), np.asarray(val)
        self.test_index = np.asarray(test if test is not None else [], dtype=np.int64)
        self.batch_size = batch_size
        self.seed = seed
        self.task_group = task_group
        self.target_index = np.asarray(target if target is not None else [], dtype=np.int64)
        self._target_rng = np.random.default_rng(seed + 1)
        self._train_gen = torch.Generator().manual_seed(seed)  # the training shuffle, carried across epochs
        self._sampler: TaskGroupBatchSampler | None = None
        self._sampler_state: str | None = None

    def state_dict(self) -> dict:
        """Where the training shuffle and the CMD draws stand (saved in a resume checkpoint), so
        that a resumed run draws the batches an uninterrupted one would."""
        state = {"train_generator": self._train_gen.get_state(),
                 "target_rng": json.dumps(self._target_rng.bit_generator.state)}
        if self._sampler is not None:
            state["sampler_rng"] = json.dumps(self._sampler.rng.bit_generator.state)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        self._train_gen.set_state(state_dict["train_generator"])
        self._target_rng.bit_generator.state = json.loads(state_dict["target_rng"])
        self._sampler_state = state_dict.get("sampler_rng")

    def _leaves(self, idx: np.ndarray):
        return dense_programs(self.data, idx)

    def collate(self, indices: list[int]) -> dict:
        """Pad the programs at ``indices`` into one batch (see the class docstring)."""
        idx = np.asarray(indices, dtype=np.int64)
        x, pos, mask = self._leaves(idx)
        y = torch.from_numpy(np.log(self.data.latency[idx]).astype(np.float32))
        workload = torch.from_numpy(np.asarray(self.data.workload[idx], dtype=np.int64))
        dev = self.data.device_row[idx] if self.data.device_row is not None else np.zeros(len(idx), np.int64)
        return {
            "x": x,
            "pos": pos,
            "mask": mask,
            "y": y,
            "index": torch.from_numpy(idx),
            "workload": workload,
            "device_row": torch.from_numpy(np.asarray(dev, dtype=np.int64)),
        }

    def collate_train(self, indices: list[int]) -> dict:
        """:meth:`collate`, plus each program's level weight when ``level_weight`` was given and a
        batch of target-domain programs when ``target`` was given."""
        batch = self.collate(indices)
        if self.level_weight is not None:
            batch["level_weight"] = torch.from_numpy(self.level_weight[np.asarray(indices, dtype=np.int64)])
        if self.target_index.size:
            draw = self._target_rng.choice(self.target_index, size=len(indices), replace=True)
            batch["target_x"], batch["target_pos"], batch["target_mask"] = self._leaves(draw)
        return batch

    def _loader(self, index, shuffle: bool, collate=None) -> DataLoader:
        gen = self._train_gen if shuffle else torch.Generator().manual_seed(self.seed)
        return DataLoader(
            _Indices(index),
            batch_size=self.batch_size,
            shuffle=shuffle,
            collate_fn=collate or self.collate,
            generator=gen,
        )

    def train_dataloader(self):
        if self.task_group > 0:
            idx = np.asarray(self.train_index, np.int64)
            sampler = TaskGroupBatchSampler(idx, self.data.workload[idx], self.batch_size, self.task_group, self.seed)
            if self._sampler_state is not None:
                sampler.rng.bit_generator.state = json.loads(self._sampler_state)
            self._sampler = sampler
            # the sampler yields program indices; an identity dataset over all programs passes them on
            return DataLoader(_Indices(np.arange(len(self.data))), batch_sampler=sampler, collate_fn=self.collate_train)
        if self.length_pool > 0:
            idx = np.asarray(self.train_index, np.int64)
            lengths = np.diff(self.data.ptr)[idx]
            sampler = LengthPoolBatchSampler(idx, lengths, self.batch_size, self.length_pool, self._train_gen)
            return DataLoader(_Indices(np.arange(len(self.data))), batch_sampler=sampler, collate_fn=self.collate_train)
        return self._loader(self.train_index, True, self.collate_train)

    def val_dataloader(self):
        if self.length_pool > 0:  # sorted by token count: each batch pads to a similar length
            idx = np.asarray(self.val_index, np.int64)
            return self._loader(idx[np.argsort(np.diff(self.data.ptr)[idx], kind="stable")], False)
        return self._loader(self.val_index, False)

    def test_dataloader(self):
        return self._loader(self.test_index, False)

    def predict_dataloader(self):
        return self._loader(self.test_index, False)


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor, margin: float = 0.0):
    """RankNet loss (Burges et al., ICML 2005) over same-group pairs.

    For every pair ``(i, j)`` of one group whose targets differ by more than ``margin``,
    with ``target[i] > target[j]``, adds ``softplus(-(pred[i] - pred[j]))``.

    Args:
        pred, target: float32 ``(B,)`` (any monotone scale of log-latency).
        group: int64 ``(B,)`` task of each program.

    Returns:
        The mean over such pairs (a scalar tensor); 0 when the batch has none.
    """
    diff_t = target.unsqueeze(1) - target.unsqueeze(0)
    pair = (group.unsqueeze(1) == group.unsqueeze(0)) & (diff_t > margin)
    if not bool(pair.any()):
        return pred.sum() * 0.0
    diff_p = pred.unsqueeze(1) - pred.unsqueeze(0)
    return torch.nn.functional.softplus(-diff_p[pair]).mean()


def within_task_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """MSE of the within-task part: each program's deviation from its task's batch mean,
    predicted against measured.

    For programs ``i`` of task ``g`` in the batch, ``((pred_i - mean_g pred) - (target_i -
    mean_g target))^2``, averaged over programs whose task has at least 2 programs in the
    batch.  A prediction that places each task's level right but explains none of its
    spread scores the task's label variance here; a perfect one scores 0.

    Args:
        pred, target: float32 ``(B,)`` (standardised log-latency).
        group: int64 ``(B,)`` task of each program.

    Returns:
        A scalar tensor; 0 when no task has two programs in the batch.
    """
    _, inv = torch.unique(group, return_inverse=True)
    k = int(inv.max()) + 1 if inv.numel() else 0
    count = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, torch.ones_like(pred))
    keep = count[inv] > 1
    if not bool(keep.any()):
        return pred.sum() * 0.0
    mean_p = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, pred) / count
    mean_t = torch.zeros(k, dtype=pred.dtype, device=pred.device).index_add_(0, inv, target) / count
    diff = (pred - mean_p[inv]) - (target - mean_t[inv])
    return diff[keep].pow(2).mean()


def listmle_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """Position-weighted ListMLE over each task's programs in the batch, fastest first.

    For a task with programs ``1..n`` in the batch, ordered by measured latency (fastest
    first) and scored ``s = -pred`` (a higher score is a faster program), the term is
    ``sum_k w_k (log sum_{j >= k} exp(s_j) - s_k) / sum_k w_k`` with ``w_k = 1 /
    log2(k + 1)`` (``k`` from 1): the negative log-likelihood of the measured order under
    the Plackett-Luce model (ListMLE; Xia et al., ICML 2008), each place weighted as in
    NDCG so that placing the fastest programs first weighs most (position-aware
    ListMLE; Lan et al., AAAI 2014).  TLP (ASPLOS 2023) trains its cost model with a
    listwise ranking loss (LambdaRank); this one needs no sort inside the loss's graph.

    Args:
        pred, target: float32 ``(B,)`` standardised log-latency, predicted and measured.
        group: int64 ``(B,)`` task of each program.

    Returns:
        The mean over tasks with at least 2 programs in the batch (a scalar tensor); 0
        when there is none.  Only the order within each task counts: adding a constant
        to a task's predictions leaves it unchanged.
    """
    total, tasks = pred.sum() * 0.0, 0
    for g in torch.unique(group):
        at = torch.nonzero(group == g, as_tuple=True)[0]
        if at.numel() < 2:
            continue
        order = at[torch.argsort(target[at], stable=True)]
        s = -pred[order].float()
        tail = torch.logcumsumexp(s.flip(0), dim=0).flip(0)  # log sum_{j >= k} exp(s_j)
        w = 1.0 / torch.log2(torch.arange(2, s.numel() + 2, dtype=s.dtype, device=s.device))
        total = total + ((tail - s) * w).sum() / w.sum()
        tasks += 1
    return total / max(tasks, 1)


def central_moment_discrepancy(source: torch.Tensor, target: torch.Tensor, moments: int = 5) -> torch.Tensor:
    """Central moment discrepancy between two samples of embeddings.

    Zellinger et al., "Central Moment Discrepancy (CMD) for Domain-Invariant
    Representation Learning", ICLR 2017, eq. (4), with the activation range taken as
    1: ``||E(s) - E(t)||_2 + sum_{k=2..K} ||c_k(s) - c_k(t)||_2``, where ``c_k`` is
    the element-wise ``k``-th central moment.  CDMPP (EuroSys 2024, section 5) adds it
    to the loss so that programs of unseen networks or devices are embedded like the
    training programs.

    Args:
        source: float32 ``(N, D)``.
        target: float32 ``(M, D)``.
        moments: ``K >= 1``.

    Returns:
        A scalar tensor (0 for identical samples), differentiable in both inputs.

    Raises:
        ValueError: widths differ, a sample is empty, or ``moments < 1``.
    """
    if source.ndim != 2 or target.ndim != 2 or source.shape[1] != target.shape[1]:
        raise InputError(f"CMD needs (N, D) and (M, D) samples, got {tuple(source.shape)} and {tuple(target.shape)}")
    if source.shape[0] == 0 or target.shape[0] == 0 or moments < 1:
        raise InputError(f"CMD needs non-empty samples and moments >= 1, got {source.shape[0]}, {target.shape[0]}, {moments}")
    ms, mt = source.mean(0), target.mean(0)
    out = torch.linalg.vector_norm(ms - mt)
    cs, ct = source - ms, target - mt
    for k in range(2, moments + 1):
        out = out + torch.linalg.vector_norm(cs.pow(k).mean(0) - ct.pow(k).mean(0))
    return out


def drop_trace_tokens(x: torch.Tensor, mask: torch.Tensor, p: float) -> torch.Tensor:
    """Trace dropout: ``mask`` with the trace token (the first position, flagged in the
    last column: :func:`cdmpp.featurize.trace.with_trace_tokens`) of each program masked
    out with probability ``p``, so that the program is seen as its leaves alone.  A
    program without a leaf besides its token keeps it.

    Args:
        x: float32 ``(B, L, F)`` padded rows; mask: bool ``(B, L)``.

    Returns:
        bool ``(B, L)``, a new mask.
    """
    has = (x[:, 0, -1] == 1) & mask[:, 0] & (mask.sum(1) > 1)
    drop = has & (torch.rand(has.shape, device=mask.device) < p)
    out = mask.clone()
    out[:, 0] = mask[:, 0] & ~drop
    return out


class LatencyModule(L.LightningModule):
    """Loss and optimiser around :class:`LatencyTransformer`.

    The loss is the MSE (or, with ``huber_delta``, the Huber loss) on standardised
    log-latency, plus ``within_weight`` times :func:`within_task_loss`, plus
    ``rank_weight`` times :func:`pairwise_rank_loss` within tasks, plus (in training, when the batch holds
    target-domain programs) ``cmd_weight`` times :func:`central_moment_discrepancy`
    between the pooled embeddings of the batch and of the target programs (see
    :class:`TrainConfig`).
    """

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig):
        super().__init__()
        self.model = LatencyTransformer(model_config)
        self.train_config = train_config

    def shared_step(self, batch: dict, stage: str) -> torch.Tensor:
        """Loss of one batch, logged as ``<stage>_loss``."""
        target = (batch["y"] - self.model.label_mean) / self.model.label_std
        mask = batch["mask"]
        if stage == "train" and self.train_config.trace_dropout > 0 and self.model.config.trace_tokens:
            mask = drop_trace_tokens(batch["x"], mask, self.train_config.trace_dropout)
        device_row = batch.get("device_row")
        tokens = self.model.encoded(batch["x"], batch["pos"], mask, device_row)
        row = None
        if (device_row is not None and stage == "train" and self.train_config.device_dropout > 0
                and self.model.config.num_devices > 0):  # no device table: draw nothing, keep the RNG stream
            drop = torch.rand(device_row.shape, device=device_row.device) < self.train_config.device_dropout
            row = torch.where(drop, torch.zeros_like(device_row), device_row)
        pred = self.model.output(tokens, mask, device_row, row, x=batch["x"])
        c = self.train_config
        weight = batch.get("level_weight") if stage == "train" else None
        reduction = "mean" if weight is None else "none"
        if c.huber_delta > 0:
            loss = torch.nn.functional.huber_loss(pred, target, delta=c.huber_delta, reduction=reduction)
        else:
            loss = torch.nn.functional.mse_loss(pred, target, reduction=reduction)
        if weight is not None:
            loss = (loss * weight).sum() / weight.sum()
        if c.within_weight > 0:
            loss = loss + c.within_weight * within_task_loss(pred, target, batch["workload"])
        if c.listmle_weight > 0:
            loss = loss + c.listmle_weight * listmle_loss(pred, target, batch["workload"])
        if c.rank_weight > 0:
            margin = c.rank_margin / float(self.model.label_std)
            loss = loss + c.rank_weight * pairwise_rank_loss(pred, target, batch["workload"], margin)
        if c.cmd_weight > 0 and "target_x" in batch:
            h_t = self.model.pooled(batch["target_x"], batch["target_pos"], batch["target_mask"])
            cmd = central_moment_discrepancy(self.model.pool(tokens, mask), h_t, c.cmd_moments)
            self.log(f"{stage}_cmd", cmd, batch_size=len(target), on_epoch=True, on_step=False)
            loss = loss + c.cmd_weight * cmd
        self.log(f"{stage}_loss", loss, prog_bar=True, batch_size=len(target), on_epoch=True, on_step=False)
        return loss

    def training_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "val")

    def test_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.model.predict_log_latency(batch["x"], batch["pos"], batch["mask"], batch.get("device_row"))

    def configure_optimizers(self):
        c = self.train_config
        opt = torch.optim.AdamW(self.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        steps = self.trainer.estimated_stepping_batches
        # one-cycle needs a warm-up of at least 2 steps (10% of 10 steps divides by zero)
        if not isinstance(steps, int) or steps < 20 or steps > 10**8:
            return opt
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=c.lr, total_steps=steps, pct_start=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def make_trainer(max_epochs: int, *, precision: str = "32-true", progress: bool = False, logger=False,
                 callbacks=None, **kwargs) -> L.Trainer:
    """The one Lightning ``Trainer`` of cdmpp: ``accelerator="auto"`` (a GPU when torch
    sees one, else the CPU), one device, no model summary, deterministic on the CPU
    (``"warn"`` on a GPU, where some kernels have no deterministic version).  It writes
    checkpoints only where ``callbacks`` holds a ``ModelCheckpoint`` (a resumable run).

    Args:
        max_epochs: passes over the training data.
        precision: Lightning's precision (``"32-true"``, ``"bf16-mixed"``); see
            :func:`cdmpp.train.config.resolve_precision` for ``"auto"``.
        progress: show Lightning's progress bar.
        logger, callbacks, kwargs: passed to ``lightning.Trainer``.
    """
    return L.Trainer(
        max_epochs=max_epochs,
        accelerator="auto",
        devices=1,
        precision=precision,
        logger=logger,
        callbacks=callbacks,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks or ()),
        enable_progress_bar=progress,
        enable_model_summary=False,
        deterministic="warn" if torch.cuda.is_available() else True,
        **kwargs,
    )


class EpochHistory(L.Callback):
    """Appends one dict per epoch to ``out``: ``epoch`` (1-based), ``train_loss`` and
    ``val_loss`` (the epoch's mean losses, as logged by :class:`LatencyModule`; a loss
    that was not logged is absent) and ``seconds`` (the epoch's wall seconds, its
    validation included).

    Its rows and the torch random state (dropout, trace and device dropout) travel in a
    resume checkpoint, so that a resumed run keeps the epochs before it and continues
    the random stream where it stopped."""

    def __init__(self, out: list):
        self.out = out
        self._start = time.perf_counter()

    def on_train_epoch_start(self, trainer, pl_module):
        self._start = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module):  # runs after the epoch's validation
        metrics = trainer.callback_metrics
        row = {"epoch": int(trainer.current_epoch) + 1}
        for name in ("train_loss", "val_loss"):
            if name in metrics:
                row[name] = round(float(metrics[name]), 5)
        row["seconds"] = round(time.perf_counter() - self._start, 1)
        self.out.append(row)

    def state_dict(self) -> dict:
        return {"rows": json.dumps(self.out), "torch_rng": torch.get_rng_state()}

    def load_state_dict(self, state_dict: dict) -> None:
        self.out[:] = json.loads(state_dict["rows"])
        torch.set_rng_state(state_dict["torch_rng"])


class SegmentSumModule(L.LightningModule):
    """Loss and optimiser of :class:`~cdmpp.train.baselines.SegmentSumMLP` (MSE on log-latency)."""

    def __init__(self, owner):
        super().__init__()
        self.owner = owner
        self.net = owner.model_

    def training_step(self, batch, _batch_idx):
        x, seg, n, y = batch
        loss = nn.functional.mse_loss(self.owner.log_latency(x, seg, n), y)
        self.log("train_loss", loss, batch_size=n)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.net.parameters(), lr=self.owner.lr)
