"""``cdmpp train``: one entry point, :func:`train`, for a device folder and for a corpus of devices.

A device folder trains one model for its device (held-out network, validation
workloads, optional pooling of other devices' programs without a device feature).
Several device folders train one model with a device table over all of them, on a
strict split (:mod:`cdmpp.train.devices`).  Both fit the transformer
(:func:`~cdmpp.train.fit.fit_transformer`) and the tree baseline on the same training
programs, score both on the validation workloads and on the test programs, and save
the checkpoint with its model card.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from cdmpp import dataset as ds
from cdmpp.checkpoint import save_checkpoint
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.featurize.batch import FeaturizedPrograms
from cdmpp.featurize.trace import model_inputs
from cdmpp.model import ModelConfig
from cdmpp.predictor import LatencyPredictor

from .baselines import FlopsBaseline, TreeBaseline
from .config import TrainConfig, TrainData, no_cmd_target
from .devices import (
    DeviceCorpus,
    dataset_label,
    load_corpus,
    score_by_device,
    split_cdmpp,
    split_corpus,
    split_within_tasks,
    tree_inputs,
)
from .evaluate import load_featurized, network_program_counts, score_models
from .fit import fit_transformer
from .folds import never_trained
from .lightning import cmd_domain_programs
from .report import (
    BASELINE_FILE,
    CARD_FILE,
    format_device_table,
    format_table,
    model_card,
    task_weights,
)
from .splits import (
    Split,
    drop_sweep_workloads,
    drop_unstable_labels,
    holdout_network,
    networks_of,
    sweep_own_programs,
    thin_training,
)


@dataclass
class TrainResult:
    """What :func:`train` scored after training.

    Attributes:
        rows: metric rows of the test programs (held-out network or within-task test
            set): ``{model: row}`` for one device, ``{device_id: {model: row}}`` for several;
            empty when nothing was held out.
        by_device: whether ``rows`` is keyed by device first.
        title: what the rows are about.
    """

    rows: dict[str, dict]
    by_device: bool
    title: str

    def table(self) -> str:
        """The rows as the text table (one device) or the markdown device table (several)."""
        return format_device_table(self.rows, self.title) if self.by_device else format_table(self.rows, self.title)


def train(
    data: TrainData,
    out: Path,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    use_wandb: bool = True,
    progress: bool = True,
    resume: bool = False,
) -> TrainResult:
    """Train the transformer and the tree baseline on ``data`` and save them to ``out``.

    Writes ``out/model.safetensors``, ``out/config.json`` (with a ``devices`` list in
    row order when there are several devices), ``out/tree_baseline.json`` and the
    model card ``out/README.md``.

    With ``train_config.cmd_weight > 0`` the CMD term (CDMPP, EuroSys 2024, section
    4.3) matches the pooled program embeddings of the training batches to those of an
    unlabelled target domain: the programs of ``data.cmd_target`` when given (only
    their features are read, never their latencies), else the held-out network's
    programs (the validation workloads' with ``train_config.cmd_domain ==
    "validation"``).

    Returns:
        The test programs' metric rows (:class:`TrainResult`).

    Raises:
        InputError: options that do not fit the data (see :meth:`TrainData.check`), a CMD
            target without ``cmd_weight > 0`` or ``cmd_weight > 0`` with no target domain,
            a CMD target device that is in training, an unknown network, an empty split.
        DatasetError: a folder that is not a device folder with measured programs, or a
            pooled device given twice or equal to the trained one.
    """
    train_config = train_config or TrainConfig()
    model_config = model_config or ModelConfig()
    if data.cmd_target is not None and train_config.cmd_weight <= 0:
        raise InputError("a CMD target device needs cmd_weight > 0")
    several = data.several_devices()
    data.check(several)
    if not several and (train_config.sweep_workloads != "all" or train_config.sweep_weight != 1.0):
        raise InputError("sweep_workloads and sweep_weight need a dataset of several device folders (the corpus "
                         "protocol knows the operator sweep's workloads)")
    if not model_config.trace_tokens:  # a leaves-only model has no trace token to drop
        train_config = dataclasses.replace(train_config, trace_dropout=0.0)
    model_config = dataclasses.replace(model_config, trace_optional=model_config.trace_tokens
                                       and train_config.trace_dropout > 0)
    if model_config.trace_tokens and (data.pool or data.cmd_target is not None):
        raise InputError("trace tokens take no pooled devices and no CMD target device: train a leaves-only model "
                         "(--no-trace-tokens --no-loop-tokens) with --pool or --cmd-target")
    if model_config.loop_tokens and (data.pool or data.cmd_target is not None):
        raise InputError("loop tokens take no pooled devices and no CMD target device: train a leaves-only model "
                         "(--no-loop-tokens --no-trace-tokens) "
                         "with --pool or --cmd-target")
    if several:
        rows = _train_corpus(data, Path(out), model_config, train_config, use_wandb, progress, resume)
        what = {"network": f"held-out network {data.holdout}", "within-task": "within-task test programs",
                "cdmpp": f"CDMPP's protocol, held-out network {data.holdout}"}[data.split]
        return TrainResult(rows, True, f"{what} ({', '.join(str(d) for d in data.datasets)})")
    rows = _train_one_device(data, Path(out), model_config, train_config, use_wandb, progress, resume)
    return TrainResult(rows, False, f"held-out network {data.holdout} ({data.datasets[0]})")


def training_machine() -> dict:
    """The machine that trains: this CPU's device id, model and cores, and the GPU's name
    when torch sees one (the wall times in a model card are this machine's)."""


    cpu = local_cpu()
    return {"device_id": cpu.device_id, "model": cpu.model, "cores": cpu.cores,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def _fit(fit_data, split: Split, model_config, train_config, out: Path, use_wandb, progress, target,
         descriptors=None, resume: bool = False, caches=None, sweep_programs=None):
    """The transformer fitted on ``split.train``, its loss history and its wall seconds (those
    of every epoch, the epochs before a resume included)."""

    t0 = time.time()
    history: list[dict] = []
    model = fit_transformer(fit_data, split, model_config, train_config, out / "logs", use_wandb, progress=progress,
                            target=target, history=history, device_descriptors=descriptors,
                            resume_dir=out / "resume", resume=resume, device_caches=caches,
                            sweep_programs=sweep_programs)
    return model, history, max(time.time() - t0, sum(row.get("seconds", 0.0) for row in history))


def _save(model, tree, meta: dict, out: Path, card: str) -> None:
    save_checkpoint(model, out, meta)
    tree.save(out / BASELINE_FILE)
    (out / CARD_FILE).write_text(card, encoding="utf-8")


def _train_one_device(data: TrainData, out: Path, model_config, train_config, use_wandb, progress,
                      resume: bool = False) -> dict:
    """One device folder: held-out-network split, optional pooling; returns the held-out rows."""
    dataset, holdout = data.datasets[0], data.holdout
    db, programs = load_featurized(dataset, data.cache_dir, progress, loops=model_config.loop_tokens)
    if model_config.trace_tokens or model_config.loop_tokens:  # loops among the leaves; the trace as a token before
        programs = model_inputs(model_config, programs, ds.device_dirs(dataset)[:1])
        model_config = dataclasses.replace(model_config, feature_dim=programs.x.shape[1])
    split = holdout_network(programs.workload, programs.workload_keys, db.manifest, holdout, seed=train_config.seed)
    split = thin_training(split, programs.workload, train_config.train_share, train_config.seed)
    cmd_programs = cmd_domain_programs(train_config, split)
    if train_config.cmd_weight > 0 and len(cmd_programs) == 0 and data.cmd_target is None:
        raise no_cmd_target(train_config)
    pooled_parts, pooled_meta = _pooled(db, programs, split, holdout, data.pool, data.cache_dir, progress)
    # other devices' programs follow this device's; the split's indices stay valid
    fit_data = FeaturizedPrograms.concat([programs, *pooled_parts]) if pooled_parts else programs
    fit_split = Split(np.concatenate([split.train, np.arange(len(programs), len(fit_data))]), split.val, split.test,
                      split.holdout)
    target, target_device = None, None
    if data.cmd_target is not None:
        tdb, tdata = load_featurized(Path(data.cmd_target), data.cache_dir, progress)
        n = len(fit_data)
        fit_data = FeaturizedPrograms.concat([fit_data, tdata])
        target, target_device = np.arange(n, len(fit_data)), tdb.device_id
    elif train_config.cmd_weight > 0:
        target = cmd_programs  # held-out or validation programs (features only, never latencies)
    model, history, t_model = _fit(fit_data, fit_split, model_config, train_config, out, use_wandb, progress, target,
                                   resume=resume)
    t0 = time.time()
    # the baselines learn from the transformer's training programs, no more (not its validation programs)
    tree = TreeBaseline(seed=train_config.seed).fit(fit_data.psf_sum[fit_split.train], fit_data.latency[fit_split.train])
    t_tree = time.time() - t0
    flops = FlopsBaseline().fit(programs.flops[split.train], programs.latency[split.train])
    manifests = {db.device_id: db.manifest}
    extra = {"tree": tree, "flops": flops}
    predictor = LatencyPredictor(model, {})
    rows = (score_models(predictor, extra, programs, split.test, task_weights(manifests, programs.workload_keys, holdout))
            if len(split.test) else {})
    # the recipe is chosen on these (RESULTS.md), never on the held-out network
    val_rows = (score_models(predictor, extra, programs, split.val, task_weights(manifests, programs.workload_keys, None))
                if len(split.val) else {})
    meta = {
        "dataset": str(dataset),
        "device_id": db.device_id,
        "device": db.manifest.get("device", {}),
        "holdout": holdout,
        "train_programs": int(len(fit_split.train)),
        "pooled_devices": pooled_meta,
        "val_programs": int(len(split.val)),
        "test_programs": int(len(split.test)),
        "train_config": asdict(train_config),
        "cmd_target_device": target_device,
        "train_seconds": {"transformer": round(t_model, 1), "tree_baseline": round(t_tree, 1)},
        "trained_on": training_machine(),
        "loss_by_epoch": history,
        "flops_baseline_throughput": flops.throughput_,
        "flops_baseline_floor": flops.floor_,
        "holdout_metrics": rows,
        "validation_metrics": val_rows,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    table = Path(data.benchmark_table).read_text(encoding="utf-8") if data.benchmark_table else None
    _save(model, tree, meta, out, model_card(model_config, meta, network_program_counts(db), table))
    return rows


def pooled_training_programs(
    workload: np.ndarray, workload_keys: list[str], manifest: dict, excluded_keys: set[str], holdout: str | None
) -> np.ndarray:
    """Indices of another device's programs that may join training.

    Args:
        workload: int64 ``(P,)`` workload index of each of that device's programs.
        workload_keys: structural-hash key of each workload index.
        manifest: that device's manifest (tasks with network and workload key).
        excluded_keys: workload keys that must stay out of training (the trained
            device's held-out and validation workloads).
        holdout: the held-out network; its workloads in ``manifest`` stay out too
            (tasks the trained device never measured).

    Returns:
        int64 ``(M,)``, sorted.
    """
    out = set(excluded_keys)
    if holdout is not None:
        out |= networks_of(manifest).get(holdout, set())
    keys = np.asarray(workload_keys)[np.asarray(workload, dtype=np.int64)]
    return np.flatnonzero(~np.isin(keys, list(out))).astype(np.int64)


def _pooled(db, data, split, holdout, pool, cache_dir, progress) -> tuple[list[FeaturizedPrograms], list[dict]]:
    """The programs other devices add to training, their workloads qualified by device.

    Qualified keys (``<device_id>:<key>``) keep two devices' programs of one task in
    separate groups, so within-task terms (ranking, task-group batches) never compare
    latencies of two devices.
    """
    keys = np.asarray(data.workload_keys)
    excluded = set(keys[data.workload[split.test]]) | set(keys[data.workload[split.val]])
    seen = {db.device_id}
    parts, meta = [], []
    for folder in pool:
        pdb, pdata = load_featurized(Path(folder), cache_dir, progress)
        if pdb.device_id in seen:
            raise ds.DatasetError(
                f"pooled device folder {folder} is device {pdb.device_id!r}, which is already in training"
            )
        seen.add(pdb.device_id)
        keep = pooled_training_programs(pdata.workload, pdata.workload_keys, pdb.manifest, excluded, holdout)
        part = pdata.subset(keep)
        parts.append(dataclasses.replace(part, workload_keys=[f"{pdb.device_id}:{k}" for k in part.workload_keys]))
        meta.append({"device_id": pdb.device_id, "dataset": str(folder), "programs": int(len(keep))})
    return parts, meta


def _corpus_split(corpus: DeviceCorpus, data: TrainData, train_config: TrainConfig) -> tuple[Split, dict | None]:
    """The corpus's split by ``data.split``, thinned and with unstable labels dropped, and
    the CDMPP protocol's filter counts (``None`` for the other splits)."""
    filters = None
    if data.split == "within-task":
        split = split_within_tasks(corpus, seed=train_config.seed)
    elif data.split == "cdmpp":
        split, filters = split_cdmpp(corpus, data.holdout, seed=train_config.seed)
    else:
        split = split_corpus(corpus, data.holdout, seed=train_config.seed)
    split = thin_training(split, corpus.data.workload, train_config.train_share, train_config.seed)
    split = drop_sweep_workloads(split, corpus.networks(), corpus.raw_keys, corpus.data.workload,
                                 train_config.sweep_workloads)
    return drop_unstable_labels(split, corpus.repeat_cv, train_config.max_repeat_cv), filters


def _corpus_cmd_target(corpus: DeviceCorpus, data: TrainData, split: Split, train_config: TrainConfig, progress):
    """``(fit_data, target, target_device)``: the corpus's programs followed by the CMD
    target device's (device row 0, no latency read), or the corpus's own CMD domain."""
    if data.cmd_target is None:
        if train_config.cmd_weight <= 0:
            return corpus.data, None, None
        target = cmd_domain_programs(train_config, split)
        if len(target) == 0:
            raise no_cmd_target(train_config)
        return corpus.data, target, None
    tdb, tdata = load_featurized(Path(data.cmd_target), data.cache_dir, progress)
    if any(d.device_id == tdb.device_id for d in corpus.devices):
        raise InputError(f"CMD target device {tdb.device_id} is in training; leave it out (exclude) to adapt toward it")
    # its programs follow the corpus's; the split's indices stay valid
    tdata = dataclasses.replace(tdata, workload_keys=[f"{tdb.device_id}:{k}" for k in tdata.workload_keys],
                                device_row=np.zeros(len(tdata), dtype=np.int64))
    fit_data = FeaturizedPrograms.concat([corpus.data, tdata])
    return fit_data, np.arange(len(corpus.data), len(fit_data)), tdb.device_id


def _train_corpus(data: TrainData, out: Path, model_config, train_config, use_wandb, progress,
                  resume: bool = False) -> dict:
    """Several device folders: one model with a device table; returns the test rows per device.

    The split is :func:`~cdmpp.train.devices.split_corpus`'s (``"network"``, holding out
    ``data.holdout`` on every device), :func:`~cdmpp.train.devices.split_within_tasks`'s
    (``"within-task"``) or :func:`~cdmpp.train.devices.split_cdmpp`'s (``"cdmpp"``); the
    transformer and the trees train on the same programs (the trees see no validation
    program).
    """
    corpus = load_corpus(data.datasets, data.cache_dir, data.exclude_devices, progress, loops=model_config.loop_tokens,
                         workers=data.featurize_workers)
    model_config = dataclasses.replace(model_config, num_devices=len(corpus.devices))
    leaves_only = corpus
    if model_config.trace_tokens or model_config.loop_tokens:  # loops among the leaves; the trace as a token before
        corpus = corpus.for_model(model_config)
        model_config = dataclasses.replace(model_config, feature_dim=corpus.data.x.shape[1])
    holdout = None if data.split == "within-task" else data.holdout
    split, filters = _corpus_split(corpus, data, train_config)
    fit_data, target, target_device = _corpus_cmd_target(corpus, data, split, train_config, progress)
    descriptors = corpus.descriptors()
    sweep = np.zeros(len(fit_data), dtype=bool)  # a CMD target device's programs follow the corpus's
    sweep[:len(corpus.data)] = sweep_own_programs(corpus.networks(), corpus.raw_keys)
    model, history, t_model = _fit(fit_data, split, model_config, train_config, out, use_wandb, progress, target,
                                   descriptors, resume, corpus.caches(), sweep)
    t0 = time.time()
    tree = TreeBaseline(seed=train_config.seed).fit(tree_inputs(corpus.data, descriptors, split.train),
                                                    corpus.data.latency[split.train])
    t_tree = time.time() - t0
    rows = score_by_device(model, tree, corpus, split.test, holdout) if len(split.test) else {}
    val_rows = score_by_device(model, tree, corpus, split.val, None) if len(split.val) else {}
    no_trace_rows = {}
    if model_config.trace_optional and len(split.val):  # the same programs as bare PrimFuncs: no trace token
        bare = leaves_only.for_model(model_config, traces=False)
        no_trace_rows = score_by_device(model, None, bare, split.val, None)
    counts = np.bincount(corpus.data.device_row, minlength=len(corpus.devices) + 1)
    train_counts = np.bincount(corpus.data.device_row[split.train], minlength=len(corpus.devices) + 1)
    meta = {
        "dataset": dataset_label(data.datasets),
        "devices": [
            {"row": r, "device_id": d.device_id, "descriptor": d.to_json(), "folder": str(corpus.folders[d.row_name]),
             "programs": int(counts[r]), "train_programs": int(train_counts[r])}
            for r, d in enumerate(corpus.devices, start=1)
        ],
        "excluded_devices": list(data.exclude_devices),
        "cmd_target_device": target_device,
        "holdout": holdout,
        "split": data.split if data.split == "network" else split.holdout,
        "excludes_test_networks": data.split == "network",  # the held-out test networks' workloads: never trained
        # programs of those workloads on no side of the split (they are test programs only when held out)
        "test_network_programs": int(np.sum(never_trained(corpus.raw_keys) & ~np.isin(np.arange(len(corpus.raw_keys)),
                                                                                         split.test)))
        if data.split == "network" else 0,
        "split_filters": filters,
        "train_programs": int(len(split.train)),
        "val_programs": int(len(split.val)),
        "test_programs": int(len(split.test)),
        "train_config": asdict(train_config),
        "train_seconds": {"transformer": round(t_model, 1), "tree_baseline": round(t_tree, 1)},
        "trained_on": training_machine(),
        "loss_by_epoch": history,
        "tree_inputs": "psf_sum+descriptor",
        "holdout_metrics": rows,
        "validation_metrics": val_rows,
        "validation_metrics_without_trace": no_trace_rows,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    _save(model, tree, meta, out, model_card(model_config, meta))
    return rows
