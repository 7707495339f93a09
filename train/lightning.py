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
from torch.utils.data import DataLoader

from cdmpp.featurize.batch import FeaturizedPrograms, dense_programs
from cdmpp.model import LatencyTransformer, ModelConfig

from .config import CMD_DOMAINS, TrainConfig, describe_loss, no_cmd_target  # noqa: F401  (re-exported)
from .losses import central_moment_discrepancy, drop_trace_tokens, listmle_loss, pairwise_rank_loss, within_task_loss
from .samplers import IndexDataset, LengthPoolBatchSampler, TaskGroupBatchSampler


def cmd_domain_programs(config: "TrainConfig", split) -> np.ndarray:
    """Indices of the CMD term's unlabelled programs under ``config.cmd_domain``.

    Returns ``split.val`` (int64, shape ``(n,)``) for ``"validation"``, else ``split.test``.
    """
    return split.val if config.cmd_domain == "validation" else split.test


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
        device_rows = self.data.device_row[idx] if self.data.device_row is not None else np.zeros(len(idx), np.int64)
        return {
            "x": x,
            "pos": pos,
            "mask": mask,
            "y": y,
            "index": torch.from_numpy(idx),
            "workload": workload,
            "device_row": torch.from_numpy(np.asarray(device_rows, dtype=np.int64)),
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
            IndexDataset(index),
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
            return DataLoader(IndexDataset(np.arange(len(self.data))), batch_sampler=sampler, collate_fn=self.collate_train)
        if self.length_pool > 0:
            idx = np.asarray(self.train_index, np.int64)
            lengths = np.diff(self.data.ptr)[idx]
            sampler = LengthPoolBatchSampler(idx, lengths, self.batch_size, self.length_pool, self._train_gen)
            return DataLoader(IndexDataset(np.arange(len(self.data))), batch_sampler=sampler, collate_fn=self.collate_train)
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
