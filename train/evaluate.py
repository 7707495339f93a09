"""Evaluation tables: the transformer next to the tree baseline, on one split.

Used by ``cdmpp train`` (which trains both on a held-out-network split and saves
them) and ``cdmpp evaluate`` (which scores a saved checkpoint on a dataset's
held-out network or on any MetaSchedule JSONDatabase).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.featurize.batch import FeaturizedPrograms, featurize_database

from .baselines import TreeBaseline
from .fit import fit_transformer, predict_latency_array
from .lightning import TrainConfig
from .metrics import summary
from .model import ModelConfig, load_checkpoint, save_checkpoint
from .splits import holdout_network

BASELINE_FILE = "tree_baseline.json"
COLUMNS = ("programs", "mape", "within_10", "within_25", "rmse_log", "kendall_tau")


def format_table(rows: dict[str, dict], title: str) -> str:
    """A fixed-width text table of metric rows (percentages for MAPE and within-x%)."""
    head = f"{'model':<28}{'programs':>9}{'MAPE':>9}{'<=10%':>8}{'<=25%':>8}{'RMSE(log)':>11}{'tau':>8}"
    lines = [title, head, "-" * len(head)]
    for name, r in rows.items():
        lines.append(
            f"{name:<28}{r['programs']:>9d}{100 * r['mape']:>8.1f}%{100 * r['within_10']:>7.1f}%"
            f"{100 * r['within_25']:>7.1f}%{r['rmse_log']:>11.3f}{r['kendall_tau']:>8.3f}"
        )
    return "\n".join(lines)


def load_featurized(dataset: Path, cache_dir: Path | None, progress: bool = True):
    """``(DeviceDatabase, FeaturizedPrograms)`` of the first device folder of a dataset.

    Raises:
        DatasetError: no device folder or no measured record.
    """
    db = ds.load_device_dir(ds.device_dirs(dataset)[0])
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
) -> dict[str, dict]:
    """Train the transformer and the tree baseline on one held-out-network split, save both.

    Writes ``out/model.safetensors``, ``out/config.json`` and ``out/tree_baseline.json``.

    Returns:
        Metric rows per model on the held-out network (empty when ``holdout`` is None).
    """
    model_config = model_config or ModelConfig()
    train_config = train_config or TrainConfig()
    db, data = load_featurized(dataset, cache_dir, progress)
    split = holdout_network(data.workload, data.workload_keys, db.manifest, holdout, seed=train_config.seed)
    t0 = time.time()
    model = fit_transformer(data, split, model_config, train_config, Path(out) / "logs", use_wandb, progress=progress)
    t_model = time.time() - t0
    t0 = time.time()
    tree = TreeBaseline(seed=train_config.seed).fit(
        data.psf_sum[np.concatenate([split.train, split.val])], data.latency[np.concatenate([split.train, split.val])]
    )
    t_tree = time.time() - t0
    rows = {}
    if len(split.test):
        rows = _score(model, tree, data, split.test)
    meta = {
        "dataset": str(dataset),
        "device_id": db.device_id,
        "device": db.manifest.get("device", {}),
        "holdout": holdout,
        "train_programs": int(len(split.train)),
        "val_programs": int(len(split.val)),
        "test_programs": int(len(split.test)),
        "train_config": asdict(train_config),
        "train_seconds": {"transformer": round(t_model, 1), "tree_baseline": round(t_tree, 1)},
        "heldout_metrics": rows,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    save_checkpoint(model, out, meta)
    tree.save(Path(out) / BASELINE_FILE)
    return rows


def _score(model, tree: TreeBaseline | None, data: FeaturizedPrograms, index: np.ndarray) -> dict[str, dict]:
    true, groups = data.latency[index], data.workload[index]
    rows = {"cdmpp transformer": summary(predict_latency_array(model, data, index), true, groups)}
    if tree is not None:
        rows["xgboost PerStoreFeature"] = summary(tree.predict(data.psf_sum[index]), true, groups)
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
    tree = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE) if (Path(checkpoint) / BASELINE_FILE).exists() else None
    if dataset is not None:
        db, data = load_featurized(dataset, cache_dir, progress)
        net = meta.get("holdout") if holdout == "auto" else holdout
        if net is None:
            index = np.arange(len(data))
            title = f"all {len(data)} programs of {dataset} (device {db.device_id})"
        else:
            index = holdout_network(data.workload, data.workload_keys, db.manifest, net).test
            title = f"held-out network {net} of {dataset} (device {db.device_id})"
    else:
        if workload_db is None or record_db is None:
            raise ValueError("give a dataset folder, or both a workload and a tuning-record file")
        db = ds.load_database(Path(workload_db), Path(record_db))
        data = featurize_database(db, cache_dir, progress=progress)
        index = np.arange(len(data))
        title = f"all {len(data)} programs of {record_db}"
    return _score(model, tree, data, index), title


def write_rows(rows: dict[str, dict], path: Path) -> None:
    """Write metric rows as JSON."""
    Path(path).write_text(json.dumps(rows, indent=1), encoding="utf-8")
