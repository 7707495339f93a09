"""Evaluation tables: the transformer next to the tree baseline, on one split.

Used by ``cdmpp train`` (which trains both on a held-out-network split and saves
them) and ``cdmpp evaluate`` (which scores a saved checkpoint on a dataset's
held-out network or on any MetaSchedule JSONDatabase).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from cdmpp.errors import InputError
from cdmpp import dataset as ds
from cdmpp.featurize.batch import FeaturizedPrograms, featurize_database

from .baselines import FlopsBaseline, TreeBaseline
from .fit import fit_transformer, predict_latency_array
from .config import TrainConfig, describe_loss, no_cmd_target
from .lightning import cmd_domain_programs
from .metrics import summary
from cdmpp.model import ModelConfig, load_checkpoint, save_checkpoint
from .splits import Split, holdout_network, networks_of, thin_training

BASELINE_FILE = "tree_baseline.json"
CARD_FILE = "README.md"
COLUMNS = ("programs", "mape", "within_10", "within_25", "rmse_log", "kendall_tau")


def format_table(rows: dict[str, dict], title: str) -> str:
    """A fixed-width text table of metric rows (percentages for MAPE and within-x%).

    The last three columns are the fast end (:func:`~cdmpp.train.metrics.fast_end`):
    ``best p/m``, the median predicted / measured latency of each task's fastest
    program; ``slope``, the within-task slope of log(predicted) on log(measured); and
    ``best spd``, the mean measured-best / measured latency of the predicted best.
    """
    head = (
        f"{'model':<28}{'programs':>9}{'MAPE':>9}{'<=10%':>8}{'<=25%':>8}{'RMSE(log)':>11}{'tau':>8}"
        f"{'top-1':>8}{'top-5':>8}{'best p/m':>10}{'slope':>8}{'best spd':>10}"
    )
    lines = [title, head, "-" * len(head)]
    for name, r in rows.items():
        lines.append(
            f"{name:<28}{r['programs']:>9d}{100 * r['mape']:>8.1f}%{100 * r['within_10']:>7.1f}%"
            f"{100 * r['within_25']:>7.1f}%{r['rmse_log']:>11.3f}{r['kendall_tau']:>8.3f}"
            f"{r['top1']:>8.3f}{r['top5']:>8.3f}{r.get('best_ratio', float('nan')):>10.3f}"
            f"{r.get('slope', float('nan')):>8.3f}{r.get('best_speed', float('nan')):>10.3f}"
        )
    return "\n".join(lines)


def load_featurized(dataset: Path, cache_dir: Path | None, progress: bool = True):
    """``(DeviceDatabase, FeaturizedPrograms)`` of a dataset's only device folder (or of a device folder).

    Raises:
        DatasetError: no device folder, several (name one: ``<dataset>/<device_id>``),
            or no measured record.
    """
    dirs = ds.device_dirs(dataset)
    if len(dirs) > 1:
        raise ds.DatasetError(
            f"{dataset} holds several devices ({', '.join(d.name for d in dirs)}): give one device folder"
        )
    db = ds.load_device_dir(dirs[0])
    return db, featurize_database(db, cache_dir, progress=progress)


def train_and_compare(
    dataset: Path,
    holdout: str | None,
    out: Path,
    model_config: ModelConfig | None = None,
    train_config: TrainConfig | None = None,
    cache_dir: Path | None = None,
    use_wandb: bool = True,
    progress: bool = True,
    benchmark_table: Path | None = None,
    cmd_target: Path | None = None,
    pool: list[Path] | None = None,
) -> dict[str, dict]:
    """Train the transformer and the tree baseline on one held-out-network split, save both.

    Writes ``out/model.safetensors``, ``out/config.json``, ``out/tree_baseline.json`` and
    the model card ``out/README.md`` (which embeds ``benchmark_table``, a markdown file
    written by ``cdmpp evaluate --benchmark``, when given).

    With ``train_config.cmd_weight > 0`` the CMD term's unlabelled target domain is the
    held-out network's programs (with ``train_config.cmd_domain == "validation"``, the
    validation workloads' programs), or, with ``cmd_target`` (another device's folder), every
    program of that device: cross-device adaptation (CDMPP, EuroSys 2024, section 5).
    Either way only their features are seen in training, never their latencies
    (transductive, as in the paper).

    ``pool`` lists other devices' folders whose measured programs join the training
    set, labels as measured and no device feature: one model learns from several
    CPUs, which helps on a CPU none of them is (RESULTS.md, pooling). Their programs of
    the held-out network's workloads and of the validation workloads are left out
    (:func:`pooled_training_programs`), so that no task is on both sides. The split,
    the validation and the scores stay those of ``dataset``'s device; the FLOPs
    baseline is fitted on that device alone.

    Returns:
        Metric rows per model on the held-out network (empty when ``holdout`` is None).

    Raises:
        ValueError: ``cmd_weight > 0`` with neither a held-out network nor ``cmd_target``,
            or ``cmd_target`` without ``cmd_weight > 0``.
        DatasetError: ``cmd_target`` or a ``pool`` folder is not a device folder with
            measured programs, or a pooled device is ``dataset``'s own or given twice.
    """
    model_config = model_config or ModelConfig()
    train_config = train_config or TrainConfig()
    if cmd_target is not None and train_config.cmd_weight <= 0:
        raise InputError("a CMD target device needs cmd_weight > 0")
    db, data = load_featurized(dataset, cache_dir, progress)
    split = holdout_network(data.workload, data.workload_keys, db.manifest, holdout, seed=train_config.seed)
    split = thin_training(split, data.workload, train_config.train_share, train_config.seed)
    cmd_programs = cmd_domain_programs(train_config, split)
    if train_config.cmd_weight > 0 and len(cmd_programs) == 0 and cmd_target is None:
        raise no_cmd_target(train_config)
    pooled_parts, pooled_meta = _pooled(db, data, split, holdout, pool or [], cache_dir, progress)
    # other devices' programs follow this device's; the split's indices stay valid
    train_data = FeaturizedPrograms.concat([data, *pooled_parts]) if pooled_parts else data
    fit_split = Split(
        np.concatenate([split.train, np.arange(len(data), len(train_data))]), split.val, split.test, split.holdout
    )
    target, target_device = None, None
    if cmd_target is not None:
        tdb, tdata = load_featurized(Path(cmd_target), cache_dir, progress)
        n = len(train_data)
        train_data = FeaturizedPrograms.concat([train_data, tdata])
        target, target_device = np.arange(n, len(train_data)), tdb.device_id
    elif train_config.cmd_weight > 0:
        target = cmd_programs  # held-out or validation programs (features only, never latencies)
    t0 = time.time()
    history: list[dict] = []
    model = fit_transformer(
        train_data,
        fit_split,
        model_config,
        train_config,
        Path(out) / "logs",
        use_wandb,
        progress=progress,
        target=target,
        history=history,
    )
    t_model = time.time() - t0
    t0 = time.time()
    # the baselines learn from the transformer's training programs, no more (not its validation programs)
    tree = TreeBaseline(seed=train_config.seed).fit(
        train_data.psf_sum[fit_split.train], train_data.latency[fit_split.train]
    )
    t_tree = time.time() - t0
    flops = FlopsBaseline().fit(data.flops[split.train], data.latency[split.train])
    rows = {}
    if len(split.test):
        weights = task_weights(db.manifest, data.workload_keys, holdout)
        rows = _score(model, {"tree": tree, "flops": flops}, data, split.test, weights)
    # the recipe is chosen on these (RESULTS.md), never on the held-out network
    val_rows = {}
    if len(split.val):
        weights = task_weights(db.manifest, data.workload_keys, None)
        val_rows = _score(model, {"tree": tree, "flops": flops}, data, split.val, weights)
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
        "loss_by_epoch": history,
        "flops_baseline_throughput": flops.throughput_,
        "flops_baseline_floor": flops.floor_,
        "heldout_metrics": rows,
        "validation_metrics": val_rows,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    save_checkpoint(model, out, meta)
    tree.save(Path(out) / BASELINE_FILE)
    table = Path(benchmark_table).read_text(encoding="utf-8") if benchmark_table else None
    (Path(out) / CARD_FILE).write_text(model_card(model_config, meta, db, table), encoding="utf-8")
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


def model_card(model_config: ModelConfig, meta: dict, db, benchmark_table: str | None = None) -> str:
    """The checkpoint's model card (markdown): its data, its recipe and its evaluation."""
    nets: dict[str, int] = {}
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    counts = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workload_keys))
    for t in db.manifest.get("tasks", []):
        i = index_of.get(t["workload_key"])
        if i is not None:
            nets[t["network"]] = nets.get(t["network"], 0) + int(counts[i])
    target_device = meta.get("cmd_target_device")
    cmd_domain = (
        f"all programs of device `{target_device}`"
        if target_device
        else f"{meta['train_config'].get('cmd_domain', 'heldout').replace('heldout', 'held-out')} programs"
    )
    lines = [
        "# Model card: cdmpp latency transformer",
        "",
        "Predicts the latency (seconds) of a scheduled TensorIR PrimFunc on the device below, from its compact "
        "AST (CDMPP, EuroSys 2024, sections 3-4): a transformer encoder over the leaves' feature vectors with a "
        "sinusoidal encoding of their pre-order positions, pooled, then an MLP head on log-latency.",
        "",
        "## Data",
        f"- Dataset `{meta['dataset']}`, device `{meta['device_id']}` "
        f"({meta['device'].get('model', '?')}, {meta['device'].get('cores', '?')} cores, "
        f"target `{json.dumps(meta['device'].get('target', {}))}`)",
        f"- Trained on {meta['train_programs']} programs, validated on {meta['val_programs']} "
        f"(held-out network: {meta['holdout'] or 'none'}, {meta['test_programs']} test programs)",
        *(
            [
                "- Pooled into training, labels as measured and no device feature: "
                + ", ".join(f"{p['programs']} programs of device `{p['device_id']}`" for p in meta["pooled_devices"])
                + " (their programs of the held-out and validation workloads left out)"
            ]
            if meta.get("pooled_devices")
            else []
        ),
        "- Programs per network (a task shared by networks counts in each): "
        + ", ".join(f"{n} {c}" for n, c in nets.items()),
        "- Labels: median of 10 timing repeats, measured by `cdmpp collect` (see the dataset card)",
        "",
        "## Recipe",
        f"- Model: `{json.dumps(asdict(model_config))}`",
        f"- Training: `{json.dumps(meta['train_config'])}`; loss: {describe_loss(meta['train_config'])}"
        + (
            f" plus {meta['train_config']['cmd_weight']} x CMD between the embeddings of training programs and "
            f"{cmd_domain} (features only)"
            if meta["train_config"].get("cmd_weight")
            else ""
        )
        + "; AdamW",
        f"- Wall time on this machine: {meta['train_seconds']['transformer']} s (tree baseline "
        f"{meta['train_seconds']['tree_baseline']} s)",
        "- 20 epochs and mean pooling were chosen on the validation workloads (the lowest validation "
        "RMSE(log), the training loss, averaged over three seeds and their validation draws; RESULTS.md, "
        "main job), never on the held-out network. A within-task ranking term and a FLOPs-normalised "
        "label were tried on the corpus and lost (RESULTS.md, recipe experiments).",
    ]
    if meta.get("validation_metrics"):
        lines += ["", "## Validation workloads", "", format_table(meta["validation_metrics"], "validation workloads")]
    if meta.get("heldout_metrics"):
        lines += ["", "## Held-out network", "", format_table(meta["heldout_metrics"], meta["holdout"])]
    if benchmark_table:
        lines += [
            "",
            "## Benchmark (`cdmpp evaluate --benchmark`, same data, splits and seed for every model)",
            "",
            benchmark_table.strip(),
        ]
    return "\n".join(lines) + "\n"


def task_weights(manifest: dict, workload_keys: list[str], network: str | None) -> dict[int, float]:
    """Task weight of each workload index (in ``network``, or summed over all networks)."""
    index_of = {k: i for i, k in enumerate(workload_keys)}
    out: dict[int, float] = {}
    for t in manifest.get("tasks", []):
        if (network is None or t["network"] == network) and t["workload_key"] in index_of:
            i = index_of[t["workload_key"]]
            out[i] = out.get(i, 0.0) + float(t["weight"])
    return out


def _score(model, extra: dict, data: FeaturizedPrograms, index: np.ndarray, weights=None) -> dict[str, dict]:
    """Metric rows of the transformer and the baselines in ``extra`` on programs ``index``."""
    true, groups = data.latency[index], data.workload[index]
    rows = {"cdmpp transformer": summary(predict_latency_array(model, data, index), true, groups, weights)}
    if extra.get("tree") is not None:
        rows["xgboost PerStoreFeature"] = summary(extra["tree"].predict(data.psf_sum[index]), true, groups, weights)
    if extra.get("flops") is not None:
        rows["FLOPs / best throughput"] = summary(extra["flops"].predict(data.flops[index]), true, groups, weights)
    return rows


def evaluate_checkpoint(
    checkpoint: Path,
    dataset: Path | None = None,
    workload_db: Path | None = None,
    record_db: Path | None = None,
    holdout: str | None = "auto",
    cache_dir: Path | None = None,
    progress: bool = True,
) -> tuple[dict[str, dict], str]:
    """Score a saved checkpoint (and its tree baseline, if saved) on data it was not trained on.

    Either ``dataset`` (a cdmpp dataset folder; scored on its held-out network, by
    default the one recorded in the checkpoint) or ``workload_db`` + ``record_db``
    (any MetaSchedule JSONDatabase; scored on all its records).

    Returns:
        ``(rows, title)``.

    Raises:
        CheckpointError, DatasetError, ValueError: bad checkpoint, bad data or bad split.
    """
    model, meta = load_checkpoint(checkpoint)
    extra = {}
    if (Path(checkpoint) / BASELINE_FILE).exists():
        extra["tree"] = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE)
    if "flops_baseline_throughput" in meta:
        extra["flops"] = FlopsBaseline()
        extra["flops"].throughput_ = float(meta["flops_baseline_throughput"])
        extra["flops"].floor_ = float(meta["flops_baseline_floor"])
    weights = None
    if dataset is not None:
        db, data = load_featurized(dataset, cache_dir, progress)
        model, data, note = _for_device(model, meta, db, data)
        net = meta.get("holdout") if holdout == "auto" else holdout
        weights = task_weights(db.manifest, data.workload_keys, net)
        if net is None:
            index = np.arange(len(data))
            title = f"all {len(data)} programs of {dataset} (device {db.device_id})"
        else:
            index = holdout_network(data.workload, data.workload_keys, db.manifest, net).test
            title = f"held-out network {net} of {dataset} (device {db.device_id})"
    else:
        if workload_db is None or record_db is None:
            raise InputError("give a dataset folder, or both a workload and a tuning-record file")
        db = ds.load_database(Path(workload_db), Path(record_db))
        data = featurize_database(db, cache_dir, progress=progress)
        model, data, note = _for_device(model, meta, db, data)
        index = np.arange(len(data))
        extra.pop("flops", None)  # a bare JSONDatabase records no FLOPs
        title = f"all {len(data)} programs of {record_db}"
    return _score(model, extra, data, index, weights), title + note


def _for_device(model, meta: dict, db, data: FeaturizedPrograms):
    """``(model, data, note)`` set to predict for ``db``'s device: for a model with a device
    table, its row when the checkpoint knows the device, else a new zero-shot row
    from the device's descriptor (or the unknown row 0 when the folder records no
    device).  ``note`` is a title suffix naming how an unknown device is scored ('' for
    a known one)."""
    if model.config.num_devices <= 0:
        return model, data, ""
    from cdmpp.device import DeviceDescriptor, descriptor_vector  # pylint: disable=import-outside-toplevel

    rows = {d["device_id"]: int(d["row"]) for d in meta.get("devices", [])}
    note = ""
    if db.device_id in rows:
        row = rows[db.device_id]
    elif db.manifest.get("device"):
        from .adapt import with_new_device  # pylint: disable=import-outside-toplevel

        model, row = with_new_device(model, descriptor_vector(DeviceDescriptor.from_json(db.manifest["device"])))
        note = f"; device {db.device_id} is not in this checkpoint: zero-shot from its descriptor"
    else:
        row = 0
        note = f"; device {db.device_id} is not in this checkpoint: the unknown-device row"
    return model, dataclasses.replace(data, device=np.full(len(data), row, dtype=np.int64)), note


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
    # pylint: disable=import-outside-toplevel
    from .finetune import METHODS, FineTuneConfig, fine_tune, select_shots

    config = config or FineTuneConfig()
    model, meta = load_checkpoint(checkpoint)
    _no_device_table(model, checkpoint)
    db, data = load_featurized(dataset, cache_dir, progress)
    shots = select_shots(model, data, np.arange(len(data)), config)
    rest = np.setdiff1d(np.arange(len(data)), shots)
    if rest.size == 0:
        raise InputError(f"{dataset} has only {len(data)} programs: none is left to score after {shots.size} shots")
    weights = task_weights(db.manifest, data.workload_keys, None)
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
    from .finetune import FineTuneConfig, fine_tune  # pylint: disable=import-outside-toplevel

    config = config or FineTuneConfig()
    model, meta = load_checkpoint(checkpoint)
    _no_device_table(model, checkpoint)
    db, data = load_featurized(dataset, cache_dir, progress=False)
    shots = np.arange(len(data))
    t0 = time.time()
    tuned = fine_tune(model, data, shots, config)
    _save_adapted(tuned, out, meta, checkpoint, dataset, db, config, int(shots.size), time.time() - t0, {})
    return int(shots.size)


def write_rows(rows: dict[str, dict], path: Path) -> None:
    """Write metric rows as JSON."""
    Path(path).write_text(json.dumps(rows, indent=1), encoding="utf-8")
