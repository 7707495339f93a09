"""Lightning wrappers: the loss/optimiser module and the data module.

:class:`LatencyModule` holds a :class:`~cdmpp.train.model.LatencyTransformer` and one
shared step (MSE on standardised log-latency); :class:`ProgramDataModule` serves
padded batches of a :class:`~cdmpp.featurize.batch.FeaturizedPrograms` split.
"""

from __future__ import annotations

from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from cdmpp.featurize.batch import FeaturizedPrograms, dense

from .model import LatencyTransformer, ModelConfig


@dataclass
class TrainConfig:
    """Optimisation settings.

    Attributes:
        epochs: passes over the training programs.
        batch_size: programs per batch.
        lr: peak AdamW learning rate (one-cycle schedule).
        weight_decay: AdamW weight decay.
        seed: seed of everything (weights, shuffling, validation draw).
    """

    epochs: int = 40
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-4
    seed: int = 0


class _Indices(Dataset):
    def __init__(self, index: np.ndarray):
        self.index = np.asarray(index, dtype=np.int64)

    def __len__(self):
        return len(self.index)

    def __getitem__(self, i):
        return int(self.index[i])


class ProgramDataModule(L.LightningDataModule):
    """Batches of featurized programs for one split.

    Each batch is a dict: ``x`` float32 ``(B, L_max, F)``, ``pos`` int64 ``(B, L_max)``,
    ``mask`` bool ``(B, L_max)``, ``y`` float32 ``(B,)`` (natural log of seconds) and
    ``index`` int64 ``(B,)`` (program indices into ``data``).
    """

    def __init__(self, data: FeaturizedPrograms, train, val, test=None, batch_size: int = 128, seed: int = 0):
        super().__init__()
        self.data = data
        self.train_index, self.val_index = np.asarray(train), np.asarray(val)
        self.test_index = np.asarray(test if test is not None else [], dtype=np.int64)
        self.batch_size = batch_size
        self.seed = seed

    def collate(self, indices: list[int]) -> dict:
        """Pad the programs at ``indices`` into one batch (see the class docstring)."""
        idx = np.asarray(indices, dtype=np.int64)
        ptr, rows = [0], []
        for i in idx:
            a, b = int(self.data.ptr[i]), int(self.data.ptr[i + 1])
            rows.append(np.arange(a, b))
            ptr.append(ptr[-1] + b - a)
        rows = np.concatenate(rows)
        x, pos, mask = dense(self.data.x[rows], self.data.pos[rows], np.asarray(ptr))
        y = torch.from_numpy(np.log(self.data.latency[idx]).astype(np.float32))
        return {"x": x, "pos": pos, "mask": mask, "y": y, "index": torch.from_numpy(idx)}

    def _loader(self, index, shuffle: bool) -> DataLoader:
        gen = torch.Generator().manual_seed(self.seed)
        return DataLoader(
            _Indices(index), batch_size=self.batch_size, shuffle=shuffle, collate_fn=self.collate, generator=gen
        )

    def train_dataloader(self):
        return self._loader(self.train_index, True)

    def val_dataloader(self):
        return self._loader(self.val_index, False)

    def test_dataloader(self):
        return self._loader(self.test_index, False)

    def predict_dataloader(self):
        return self._loader(self.test_index, False)


class LatencyModule(L.LightningModule):
    """Loss and optimiser around :class:`LatencyTransformer` (MSE on standardised log-latency)."""

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig):
        super().__init__()
        self.model = LatencyTransformer(model_config)
        self.train_config = train_config

    def shared_step(self, batch: dict, stage: str) -> torch.Tensor:
        """Loss of one batch, logged as ``<stage>_loss``."""
        target = (batch["y"] - self.model.label_mean) / self.model.label_std
        pred = self.model(batch["x"], batch["pos"], batch["mask"])
        loss = torch.nn.functional.mse_loss(pred, target)
        self.log(f"{stage}_loss", loss, prog_bar=True, batch_size=len(target), on_epoch=True, on_step=False)
        return loss

    def training_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "train")

    def validation_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "val")

    def test_step(self, batch, batch_idx):  # pylint: disable=arguments-differ
        return self.shared_step(batch, "test")

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self.model.predict_log_latency(batch["x"], batch["pos"], batch["mask"])

    def configure_optimizers(self):
        c = self.train_config
        opt = torch.optim.AdamW(self.parameters(), lr=c.lr, weight_decay=c.weight_decay)
        steps = self.trainer.estimated_stepping_batches
        if not isinstance(steps, int) or steps <= 0 or steps > 10**8:
            return opt
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=c.lr, total_steps=steps, pct_start=0.1)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


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
