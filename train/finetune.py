"""Few-shot fine-tuning of a one-device checkpoint to a new device, on programs chosen by KMeans.

The deprecated ``cdmpp finetune`` and ``cdmpp measure-shots`` run through this module;
``cdmpp adapt`` (:mod:`cdmpp.train.adapt`) is the adaptation path and uses its
KMeans choice (:func:`select_shots`).

CDMPP (EuroSys 2024) carries a trained predictor to a new device with few
measurements, choosing them by KMeans over the predictor's program representations
(its "KMeans-based sampling"), so that the few measured programs cover the program
space.  Here: embed every candidate program with the trained transformer
(:meth:`~cdmpp.model.LatencyTransformer.pooled`), cluster the embeddings into
``shots`` clusters (scikit-learn's ``KMeans``), measure the program nearest each
centroid, and adapt the model to those programs' measurements.  Choosing uses no
latency, so the choice can be made before anything is measured on the new device.

Two ways to adapt (``FineTuneConfig.method``), compared on the AMD EPYC device in
RESULTS.md ("Few-shot transfer"):

- ``"offset"`` (default): shift the model's label mean by the mean log-latency
  residual on the shots, a closed-form fit of the output bias.  The ranking of
  programs is unchanged; only the level moves.  It had the lower RMSE of
  log-latency at 32 and 128 shots and kept the zero-shot Kendall tau.
- ``"full"``: fine-tune every weight on the shots with the training loss.  On 32-128
  shots it learns the level but loses ranking.

The CMD regulariser of the paper is a training option (``TrainConfig.cmd_weight``).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from cdmpp.featurize.batch import FeaturizedPrograms

from cdmpp.errors import InputError
from cdmpp.model import (
    LatencyTransformer,
    load_checkpoint,
    predict_latency_array,
    save_checkpoint,
)

from .baselines import TreeBaseline
from .evaluate import load_featurized
from .lightning import LatencyModule, ProgramDataModule, TrainConfig
from .metrics import summary
from .report import BASELINE_FILE, task_weights

SELECTIONS = ("kmeans", "random")
METHODS = ("offset", "full")


@dataclass
class FineTuneConfig:
    """How many programs of the new device to learn from, how they are chosen, how long.

    Attributes:
        shots: programs of the new device used for fine-tuning.
        selection: ``"kmeans"`` (nearest program to each KMeans centroid of the
            embeddings) or ``"random"`` (uniform, for comparison).
        method: ``"offset"`` (shift the output level only) or ``"full"`` (fine-tune
            every weight); see the module docstring.
        epochs: passes over the shots (``"full"`` only).
        lr: peak AdamW learning rate (one-cycle schedule; ``"full"`` only).
        batch_size: programs per batch (``"full"`` only).
        seed: seed of the choice and of the training.
    """

    shots: int = 64
    selection: str = "kmeans"
    method: str = "offset"
    epochs: int = 50
    lr: float = 3e-4
    batch_size: int = 32
    seed: int = 0

    def __post_init__(self):
        if self.selection not in SELECTIONS:
            raise InputError(f"selection must be one of {SELECTIONS}, got {self.selection!r}")
        if self.method not in METHODS:
            raise InputError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.shots < 1 or self.epochs < 1:
            raise InputError(f"shots and epochs must be >= 1, got {self.shots} and {self.epochs}")


@torch.no_grad()
def program_embeddings(
    model: LatencyTransformer, data: FeaturizedPrograms, index: np.ndarray, batch_size: int = 512
) -> np.ndarray:
    """Pooled program embeddings, float32 ``(len(index), d_model)``."""
    dm = ProgramDataModule(data, [], [], np.asarray(index, dtype=np.int64), batch_size)
    model.eval()
    out = [model.pooled(b["x"], b["pos"], b["mask"]) for b in dm.predict_dataloader()]
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.d_model), dtype=np.float32)


def select_shots(
    model: LatencyTransformer, data: FeaturizedPrograms, candidates: np.ndarray, config: FineTuneConfig
) -> np.ndarray:
    """The programs to measure and fine-tune on, chosen among ``candidates`` without labels.

    Args:
        candidates: int64 ``(N,)`` program indices into ``data``.

    Returns:
        int64 ``(min(shots, N),)`` sorted program indices.

    Raises:
        ValueError: no candidate.
    """
    # pylint: disable=import-outside-toplevel
    from sklearn.cluster import KMeans

    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.size == 0:
        raise ValueError("no candidate program to choose shots from")
    k = min(config.shots, candidates.size)
    if config.selection == "random" or k == candidates.size:
        return np.sort(np.random.default_rng(config.seed).choice(candidates, size=k, replace=False))
    emb = program_embeddings(model, data, candidates).astype(np.float64)
    km = KMeans(n_clusters=k, n_init=4, random_state=config.seed).fit(emb)
    dist = km.transform(emb)  # (N, k) distance of each program to each centroid
    chosen: list[int] = []
    taken = np.zeros(candidates.size, dtype=bool)
    for c in range(k):  # the nearest not-yet-chosen program of each centroid
        order = np.argsort(dist[:, c])
        j = next(int(j) for j in order if not taken[j])
        taken[j] = True
        chosen.append(int(candidates[j]))
    return np.sort(np.asarray(chosen, dtype=np.int64))


def fine_tune(
    model: LatencyTransformer,
    data: FeaturizedPrograms,
    shots: np.ndarray,
    config: FineTuneConfig | None = None,
    fast_dev_run: bool = False,
) -> LatencyTransformer:
    """A copy of ``model`` adapted to the measured programs ``shots``.

    With ``config.method == "offset"``, the copy's label mean is shifted by the mean of
    ``log(measured) - log(predicted)`` over the shots (every prediction is scaled by
    one factor; the order of programs is unchanged).  With ``"full"``, every weight is
    fine-tuned: the input normalisation and the label standardisation of ``model`` are
    kept, so the new device's latencies are learned as an offset from the old device's,
    and the loss is :class:`~cdmpp.train.lightning.LatencyModule`'s (MSE on
    standardised log-latency).

    Returns:
        The fine-tuned copy, in eval mode; ``model`` is left unchanged.

    Raises:
        ValueError: no shot, or (``"offset"``) a shot without a positive latency.
    """
    # pylint: disable=import-outside-toplevel
    import lightning as L

    config = config or FineTuneConfig()
    shots = np.asarray(shots, dtype=np.int64)
    if shots.size == 0:
        raise ValueError("fine-tuning needs at least one measured program")
    if config.method == "offset":
        from .fit import predict_latency_array  # pylint: disable=import-outside-toplevel

        residual = np.log(data.latency[shots]) - np.log(predict_latency_array(model, data, shots))
        if not np.all(np.isfinite(residual)):
            raise ValueError("a shot has a non-positive or missing latency")
        tuned = copy.deepcopy(model).eval()
        tuned.label_mean += float(residual.mean())
        return tuned
    L.seed_everything(config.seed, workers=True, verbose=False)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    tc = TrainConfig(epochs=config.epochs, batch_size=config.batch_size, lr=config.lr, seed=config.seed)
    module = LatencyModule(model.config, tc)
    module.model = copy.deepcopy(model).train()
    dm = ProgramDataModule(data, shots, [], None, tc.batch_size, tc.seed)
    trainer = L.Trainer(
        max_epochs=tc.epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        fast_dev_run=fast_dev_run,
        deterministic=True,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=dm)
    return module.model.eval()


def finetune_and_compare(
    checkpoint: Path,
    dataset: Path,
    out: Path | None = None,
    config=None,
    cache_dir: Path | None = None,
    progress: bool = True,
) -> tuple[dict[str, dict], str]:
    """Few-shot transfer of a checkpoint to the device of ``dataset``, scored on the rest.

    Chooses ``config.shots`` programs of the device folder without looking at their
    latencies (:func:`~cdmpp.train.finetune.select_shots`), adapts copies of the
    checkpoint to their measurements both ways (:func:`~cdmpp.train.finetune.fine_tune`:
    ``"offset"`` and ``"full"``) and scores, on every other program of the folder: the
    checkpoint as it is (zero-shot), both adapted copies, gradient-boosted trees
    trained on the shots alone, and the checkpoint's own trees (zero-shot) when it has
    them.  The shots' tasks also occur among the scored programs.  Writes the copy of
    ``config.method`` to ``out`` when given.

    Returns:
        ``(rows, title)``.

    Raises:
        CheckpointError, DatasetError, ValueError: bad checkpoint, bad data, or a
        folder with no program left to score.
    """
    config = config or FineTuneConfig()
    model, meta = load_checkpoint(checkpoint)
    _no_device_table(model, checkpoint)
    db, data = load_featurized(dataset, cache_dir, progress)
    shots = select_shots(model, data, np.arange(len(data)), config)
    rest = np.setdiff1d(np.arange(len(data)), shots)
    if rest.size == 0:
        raise InputError(f"{dataset} has only {len(data)} programs: none is left to score after {shots.size} shots")
    weights = task_weights({db.device_id: db.manifest}, data.workload_keys, None)
    true, groups = data.latency[rest], data.workload[rest]
    adapted, seconds = {}, {}
    for method in METHODS:
        t0 = time.time()
        adapted[method] = fine_tune(model, data, shots, dataclasses.replace(config, method=method))
        seconds[method] = time.time() - t0
    tuned, t_tune = adapted[config.method], seconds[config.method]
    tree = TreeBaseline(seed=config.seed).fit(data.psf_sum[shots], data.latency[shots])
    rows = {
        "zero-shot transformer": summary(predict_latency_array(model, data, rest), true, groups, weights),
        "offset-tuned transformer": summary(predict_latency_array(adapted["offset"], data, rest), true, groups, weights),
        "fine-tuned transformer": summary(predict_latency_array(adapted["full"], data, rest), true, groups, weights),
        "xgboost on the shots only": summary(tree.predict(data.psf_sum[rest]), true, groups, weights),
    }
    if (Path(checkpoint) / BASELINE_FILE).exists():  # the checkpoint's own trees, zero-shot
        source_tree = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE)
        rows["zero-shot xgboost"] = summary(source_tree.predict(data.psf_sum[rest]), true, groups, weights)
    if out is not None:
        _save_adapted(tuned, out, meta, checkpoint, dataset, db, config, int(shots.size), t_tune, rows)
    title = (
        f"{len(rest)} programs of {dataset} (device {db.device_id}) after {shots.size} shots "
        f"chosen by {config.selection}; offset fitted in {seconds['offset']:.1f} s, every weight fine-tuned in "
        f"{seconds['full']:.1f} s; the {config.method!r} copy is the result"
    )
    return rows, title


def _no_device_table(model, checkpoint) -> None:
    """Fine-tuning moves every device of a checkpoint with a device table; refuse it."""
    if model.config.num_devices > 0:
        raise InputError(
            f"{checkpoint} predicts for several devices (a device table): fine-tuning it would move every device; "
            "use `cdmpp adapt` (this machine) or `cdmpp bench adapt-table` (a measured device folder) instead"
        )


def _save_adapted(model, out, meta, checkpoint, dataset, db, config, programs: int, seconds: float, rows) -> None:
    save_checkpoint(
        model,
        out,
        {
            **meta,
            "fine_tuned_from": str(checkpoint),
            "dataset": str(dataset),
            "device_id": db.device_id,
            "device": db.manifest.get("device", {}),
            "fine_tune": {**asdict(config), "programs": programs, "seconds": round(seconds, 1)},
            "fine_tune_metrics": rows,
            "heldout_metrics": {},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )


def adapt_checkpoint(checkpoint: Path, dataset: Path, out: Path, config=None, cache_dir: Path | None = None) -> int:
    """Adapt a checkpoint to every measured program of a device folder and save it (no scoring).

    The step after ``cdmpp measure-shots``: the folder holds only the few programs
    measured on the new device, and all of them are the shots
    (:func:`~cdmpp.train.finetune.fine_tune` with ``config.method``).

    Returns:
        The number of programs adapted on.

    Raises:
        CheckpointError, DatasetError, ValueError: bad checkpoint or bad data.
    """
    config = config or FineTuneConfig()
    model, meta = load_checkpoint(checkpoint)
    _no_device_table(model, checkpoint)
    db, data = load_featurized(dataset, cache_dir, progress=False)
    shots = np.arange(len(data))
    t0 = time.time()
    tuned = fine_tune(model, data, shots, config)
    _save_adapted(tuned, out, meta, checkpoint, dataset, db, config, int(shots.size), time.time() - t0, {})
    return int(shots.size)
