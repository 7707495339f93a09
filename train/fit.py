"""Training and prediction with the transformer (one call each)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import torch

from cdmpp.errors import InputError
from cdmpp.featurize.batch import FeaturizedPrograms
from cdmpp.model import LatencyTransformer, ModelConfig

from .config import resolve_precision
from .lightning import EpochHistory, LatencyModule, ModelCheckpoint, ProgramDataModule, TrainConfig, make_trainer
from .splits import Split

RESUME_CHECKPOINT = "last.ckpt"  # the checkpoint of the latest finished epoch
RESUME_RUN = "run.json"  # what the run in a resume folder trains: its recipe and its split's sizes


def fast_end_weights(workload: np.ndarray, latency: np.ndarray, train: np.ndarray, fast_weight: float,
                     share: float = 0.1) -> np.ndarray:
    """Each program's weight in the level loss, float32 ``(P,)``: ``1 + fast_weight`` for the
    fastest ``share`` of each task's training programs (at least one per task), 1 elsewhere.

    Args:
        workload: int64 ``(P,)`` each program's task (device-qualified in a corpus of
            several devices, so a task is one workload on one device).
        latency: float64 ``(P,)`` measured seconds.
        train: int ``(K,)`` the training programs; only their latencies are read, and
            only they are weighted.
        fast_weight: the extra weight, >= 0.
        share: the fastest share of each task's training programs that is weighted.
    """
    weights = np.ones(len(latency), dtype=np.float32)
    train = np.asarray(train, dtype=np.int64)
    if fast_weight <= 0 or train.size == 0:
        return weights
    # tasks in order, each task's programs fastest first
    order = train[np.lexsort((latency[train], workload[train]))]
    _, start, count = np.unique(workload[order], return_index=True, return_counts=True)
    place = np.arange(order.size) - np.repeat(start, count)
    keep = place < np.repeat(np.maximum(1, np.floor(share * count)), count)
    weights[order[keep]] += np.float32(fast_weight)
    return weights


def workload_weights(workload: np.ndarray, train: np.ndarray, power: float) -> np.ndarray:
    """Each program's weight in the level loss, float32 ``(P,)``: ``n ** -power`` for a
    training program whose task has ``n`` training programs, scaled so that the training
    programs' weights average 1; 1 elsewhere.

    At ``power`` 1 every task counts alike in the level, however many programs it has:
    an untunable task's one program as much as a tunable task's whole set.

    Args:
        workload: int64 ``(P,)`` each program's task (device-qualified in a corpus of
            several devices).
        train: int ``(K,)`` the training programs; only they are weighted.
        power: in [0, 1]; 0 weighs every program 1.
    """
    weights = np.ones(len(workload), dtype=np.float32)
    train = np.asarray(train, dtype=np.int64)
    if power <= 0 or train.size == 0:
        return weights
    _, inverse, counts = np.unique(workload[train], return_inverse=True, return_counts=True)
    w = counts[inverse].astype(np.float64) ** -float(power)
    weights[train] = (w / w.mean()).astype(np.float32)
    return weights


def level_weights(data: FeaturizedPrograms, train: np.ndarray, config,
                  sweep_programs: np.ndarray | None = None) -> np.ndarray | None:
    """The level loss's weight of each program under ``config``'s ``fast_weight``,
    ``workload_weight`` and ``sweep_weight`` (their product; :func:`fast_end_weights`,
    :func:`workload_weights`), float32 ``(P,)``, or ``None`` when every program weighs alike.

    Args:
        sweep_programs: bool ``(P,)``, the operator sweep's own programs
            (:func:`~cdmpp.train.splits.sweep_own_programs`), weighted
            ``config.sweep_weight`` times; needed when that is not 1.

    Raises:
        InputError: ``sweep_weight`` other than 1 without ``sweep_programs``, or a mask of
            another length than the programs.
    """
    sweep_weight = config.sweep_weight
    if config.fast_weight <= 0 and config.workload_weight <= 0 and sweep_weight == 1.0:
        return None
    weights = (fast_end_weights(data.workload, data.latency, train, config.fast_weight)
               * workload_weights(data.workload, train, config.workload_weight))
    if sweep_weight != 1.0:
        if sweep_programs is None or len(sweep_programs) != len(weights):
            raise InputError(f"sweep_weight {sweep_weight} needs a mask of the operator sweep's own programs, one "
                             f"per program ({len(weights)}); the corpus protocol (several device folders) gives it")
        weights[np.asarray(sweep_programs, dtype=bool)] *= np.float32(sweep_weight)
    return weights


def fit_transformer(
    data: FeaturizedPrograms,
    split: Split,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    log_dir: Path | None = None,
    use_wandb: bool = True,
    fast_dev_run: bool = False,
    progress: bool = True,
    target: np.ndarray | None = None,
    device_descriptors: np.ndarray | None = None,
    history: list | None = None,
    resume_dir: Path | None = None,
    resume: bool = False,
    padded_encoder: bool = False,
    device_caches: np.ndarray | None = None,
    sweep_programs: np.ndarray | None = None,
) -> LatencyTransformer:
    """Train a :class:`LatencyTransformer` on ``split.train`` (validating on ``split.val``).

    Logs to wandb in offline mode (``WANDB_MODE`` may override) under ``log_dir``.

    Args:
        target: int64 ``(M,)`` indices of unlabelled target-domain programs (for
            example the held-out network's) for the CMD term of
            ``train_config.cmd_weight``: only their features are used, never their
            latencies.  Ignored when ``cmd_weight`` is 0.
        device_descriptors: float32 ``(num_devices + 1, DESCRIPTOR_DIM)``, the device
            table's descriptors, for a model with device input (``data.device_row`` holds
            each program's row).
        device_caches: ``(num_devices + 1, 3)`` bytes of each row's L1 data cache, L2 and
            L3 (:meth:`cdmpp.train.devices.DeviceCorpus.caches`), for a ``cache_fit``
            model (``None``: :data:`cdmpp.device.DEFAULT_CACHES` on every row).
        sweep_programs: bool ``(P,)``, the operator sweep's own programs, whose level-loss
            weight is ``train_config.sweep_weight`` (:func:`level_weights`).
        history: a list that gets one dict per epoch: ``epoch`` (1-based), ``train_loss``
            and ``val_loss`` (the epoch's mean loss on the training and validation
            programs; ``val_loss`` is absent without validation programs) and ``seconds``
            (its wall seconds).  The validation curve behind a choice of ``epochs``
            (RESULTS.md).
        resume_dir: a folder for the checkpoint of the latest finished epoch (Lightning's
            ``last.ckpt``, with the optimiser, the learning-rate schedule, the random
            state and ``history``) and ``run.json`` (the recipe and the split's sizes).
            It is removed once every epoch has run.
        resume: continue the run whose checkpoint ``resume_dir`` holds, from its latest
            finished epoch (a resumed run draws the batches and the dropout of an
            uninterrupted one).  Without a checkpoint there, training starts afresh.
        padded_encoder: run the encoder on the padded batch
            (:attr:`LatencyTransformer.pack_tokens` False): the same model with more
            work, for the epoch-time benchmark's before and after.

    Returns:
        The trained model, in eval mode.

    Raises:
        ValueError: an empty training split, or ``cmd_weight > 0`` without target programs.
        InputError: ``resume`` with a checkpoint of another recipe or split in ``resume_dir``, or
            ``sweep_weight`` other than 1 without ``sweep_programs``.
    """

    model_config = model_config or ModelConfig()
    train_config = train_config or TrainConfig()
    if len(split.train) == 0:
        raise InputError("the training split is empty")
    if train_config.cmd_weight > 0 and (target is None or len(target) == 0):
        raise InputError("cmd_weight > 0 needs target-domain programs (target=...) for the CMD term")
    target = np.asarray(target if train_config.cmd_weight > 0 else [], dtype=np.int64)
    L.seed_everything(train_config.seed, workers=True, verbose=False)
    module = LatencyModule(model_config, train_config)
    module.model.pack_tokens = not padded_encoder
    if model_config.num_devices > 0:
        if device_descriptors is None or data.device_row is None:
            raise InputError("a model with device input needs data.device_row and device_descriptors")
        module.model.set_device_descriptors(device_descriptors)
    if model_config.cache_fit and device_caches is not None:
        module.model.set_device_caches(device_caches)
    rows = np.concatenate([np.arange(data.ptr[i], data.ptr[i + 1]) for i in split.train])
    module.model.set_normalization(
        torch.from_numpy(data.x[rows]), torch.from_numpy(np.log(data.latency[split.train]))
    )
    dm = ProgramDataModule(
        data,
        split.train,
        split.val,
        split.test,
        train_config.batch_size,
        train_config.seed,
        train_config.task_group,
        target,
        train_config.length_pool,
        level_weights(data, split.train, train_config, sweep_programs),
    )
    logger = False
    if use_wandb and not fast_dev_run:
        from lightning.pytorch.loggers import WandbLogger  # noqa: PLC0415  (only on the branch that needs it)

        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        save_dir = Path(log_dir or "runs")
        save_dir.mkdir(parents=True, exist_ok=True)
        logger = WandbLogger(project="cdmpp", save_dir=str(save_dir), mode=os.environ["WANDB_MODE"])
        # Lightning passes anonymous=None to wandb.init, and wandb warns that the setting has no effect
        getattr(logger, "_wandb_init", {}).pop("anonymous", None)
        logger.log_hyperparams({"holdout": split.holdout, **vars(model_config), **vars(train_config)})
    callbacks = [EpochHistory(history if history is not None else [])]
    ckpt_path = None
    if resume_dir is not None:
        run = {"model": dataclasses.asdict(model_config), "train": dataclasses.asdict(train_config),
               "train_programs": int(len(split.train)), "val_programs": int(len(split.val)),
               "programs": int(len(data.latency))}
        ckpt_path = _resume_point(Path(resume_dir), run, resume)
        # the one checkpoint kept, overwritten after every training epoch (``save_last`` alone writes
        # nothing before training ends when ``save_top_k`` is 0, so a killed run would keep nothing)
        callbacks.append(ModelCheckpoint(dirpath=str(resume_dir), filename=Path(RESUME_CHECKPOINT).stem,
                                         save_top_k=1, save_on_train_epoch_end=True, enable_version_counter=False))
    trainer = make_trainer(
        train_config.epochs,
        precision=resolve_precision(train_config.precision),
        progress=progress,
        logger=logger,
        callbacks=callbacks,
        fast_dev_run=fast_dev_run,
        num_sanity_val_steps=0,
        limit_val_batches=1.0 if len(split.val) else 0,
        default_root_dir=str(log_dir) if log_dir else None,
    )
    with warnings.catch_warnings():
        # the resume folder is this run's own (cleared above, or the checkpoint it resumes from)
        warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
        trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path, weights_only=True)
    if logger:
        logger.experiment.finish()
    if resume_dir is not None and trainer.current_epoch >= train_config.epochs:
        shutil.rmtree(resume_dir, ignore_errors=True)  # every epoch ran: nothing to resume
    return module.model.cpu().eval()


def _resume_point(folder: Path, run: dict, resume: bool) -> str | None:
    """The checkpoint to continue from (``None``: start afresh, clearing ``folder``)."""
    ckpt, spec = folder / RESUME_CHECKPOINT, folder / RESUME_RUN
    if resume and ckpt.exists():
        saved = json.loads(spec.read_text(encoding="utf-8")) if spec.exists() else None
        if saved != json.loads(json.dumps(run, default=str)):
            raise InputError(f"{ckpt} is a checkpoint of another recipe or split than this run's; "
                             f"train afresh without --resume, or remove {folder}")
        return str(ckpt)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    spec.write_text(json.dumps(run, indent=1, default=str), encoding="utf-8")
    return None

