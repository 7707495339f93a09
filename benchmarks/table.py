"""``cdmpp bench table``: every model on the same splits, data and seed.

For each split (leave-one-network-out over several networks, then a random split by
program for reference) it trains the transformer (and, for the ablation, the same
transformer without the pre-order positional encoding), gradient-boosted trees over
summed ``PerStoreFeature`` (TVM's XGBModel / TenSet baseline), a segment-sum MLP over
the same rows (TVM's MLPModel) and the FLOPs baseline (no learning), then scores
them with MAPE, within 10%/25%, RMSE of log-latency, mean Kendall tau within tasks
and TenSet's task-weighted top-1/top-5 scores (TenSet, NeurIPS 2021, section 5).
Training wall time and prediction throughput (programs per second, features
precomputed) are reported with them.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks import render_table, write_csv_and_markdown
from cdmpp.featurize.ast import OWN_FEATURES
from cdmpp.model import ModelConfig
from cdmpp.predictor import LatencyPredictor
from cdmpp.recipe_args import add_model_arguments, model_configs
from cdmpp.train.baselines import FlopsBaseline, SegmentSumMLP, TreeBaseline
from cdmpp.train.config import TrainConfig
from cdmpp.train.evaluate import load_featurized
from cdmpp.train.fit import fit_transformer
from cdmpp.train.lightning import cmd_domain_programs
from cdmpp.train.metrics import summary
from cdmpp.train.report import task_weights
from cdmpp.train.splits import Split, holdout_network, networks_of, random_programs

METRICS = ("mape", "within_10", "within_25", "rmse_log", "kendall_tau", "top1", "top5", "best_ratio", "slope", "best_speed")


@dataclass
class BenchmarkConfig:
    """What ``run_benchmark`` trains and on which splits.

    Attributes:
        holdouts: networks held out in turn (``None``: every network with measured programs).
        random_split: also score a random split by program (tasks on both sides).
        positional_encoding_ablation: also train the transformer without the positional encoding.
        access_ablation: also train the transformer without the buffer-access features
            (:mod:`cdmpp.featurize.access` columns set to 0; ``OWN_FEATURES`` only).
        model: the transformer's configuration; the benchmark compares inputs of the
            compact AST, so its transformers read the leaves only (``trace_tokens`` and
            ``loop_tokens`` are set off; mean-pooled by default).
        train: its training recipe (its ``seed`` seeds every model and split).
        mlp_epochs: training epochs of the segment-sum MLP.
        log_dir: where the transformer runs log to wandb (offline).
    """

    holdouts: list[str] | None = None
    random_split: bool = True
    positional_encoding_ablation: bool = True
    access_ablation: bool = False
    model: ModelConfig = field(default_factory=lambda: ModelConfig(pooling="mean", loop_tokens=False))
    train: TrainConfig = field(default_factory=TrainConfig)
    mlp_epochs: int = 30
    log_dir: Path = Path("runs/benchmark/logs")


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _models(cfg: BenchmarkConfig, data, split: Split, ablations: list = ()):
    """``(name, fit() -> predictor, predict(predictor, index) -> seconds)`` of every model."""
    # every model learns from the same programs: the transformer's training split (its
    # validation programs only watch its loss, so the baselines do not fit them either)

    fit_index = np.asarray(split.train)
    seed = cfg.train.seed

    # with a CMD term, the test programs are its unlabelled target domain (features only)
    target = cmd_domain_programs(cfg.train, split) if cfg.train.cmd_weight > 0 else None

    def transformer(mcfg, inputs=data):
        return (
            lambda: fit_transformer(
                inputs, split, mcfg, cfg.train, cfg.log_dir, use_wandb=True, progress=False, target=target
            ),
            lambda m, idx: LatencyPredictor(m, {}).predict_featurized(inputs, idx),
        )

    models = [("cdmpp transformer", *transformer(cfg.model))]
    if cfg.positional_encoding_ablation:
        no_pe = dataclasses.replace(cfg.model, positional_encoding=False)
        models.append(("  without positional enc.", *transformer(no_pe)))
    models += [(name, *transformer(cfg.model, inputs)) for name, inputs in ablations]
    models += [
        (
            "xgboost PerStoreFeature",
            lambda: TreeBaseline(seed=seed).fit(data.psf_sum[fit_index], data.latency[fit_index]),
            lambda m, idx: m.predict(data.psf_sum[idx]),
        ),
        (
            "segment-sum MLP",
            lambda: SegmentSumMLP(epochs=cfg.mlp_epochs, seed=seed).fit(data, fit_index),
            lambda m, idx: m.predict(data, idx),
        ),
        (
            "FLOPs / best throughput",
            lambda: FlopsBaseline().fit(data.flops[fit_index], data.latency[fit_index]),
            lambda m, idx: m.predict(data.flops[idx]),
        ),
    ]
    return models


def own_features_only(data):
    """A copy of ``data`` whose leaf rows keep only ``OWN_FEATURES`` (the buffer-access
    columns set to 0)."""

    x = data.x.copy()
    x[:, len(OWN_FEATURES):] = 0.0
    return dataclasses.replace(data, x=x)


def run_benchmark(dataset: Path, cfg: BenchmarkConfig | None = None, cache_dir: Path | None = None) -> list[dict]:
    """Train and score every model on every split of a dataset's first device.

    Returns:
        One row per (split, model): ``split``, ``model``, ``programs``, the metrics in
        ``METRICS`` (fractions, not percent), ``train_s`` (wall seconds) and
        ``predict_programs_per_s``.

    Raises:
        DatasetError: no measured data.  ValueError: an unknown held-out network.
    """
    cfg = cfg or BenchmarkConfig()
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, trace_tokens=False, trace_optional=False,
                                                                     loop_tokens=False))
    db, data = load_featurized(Path(dataset), cache_dir, progress=False)
    measured = set(np.asarray(data.workload_keys)[np.unique(data.workload)])
    holdouts = cfg.holdouts
    if holdouts is None:
        holdouts = [n for n, keys in networks_of(db.manifest).items() if keys & measured]
    splits = [
        (n, holdout_network(data.workload, data.workload_keys, db.manifest, n, seed=cfg.train.seed), n)
        for n in holdouts
    ]
    if cfg.random_split:
        splits.append(("random by program", random_programs(len(data), seed=cfg.train.seed), None))
    ablations = []  # the ablation's inputs, built once for every split
    if cfg.access_ablation:
        ablations = [("  without buffer-access features", own_features_only(data))]
    rows = []
    for name, split, net in splits:
        if len(split.test) == 0:
            continue
        weights = task_weights({db.device_id: db.manifest}, data.workload_keys, net)
        true, groups = data.latency[split.test], data.workload[split.test]
        for model_name, fit, predict in _models(cfg, data, split, ablations):
            model, train_s = _timed(fit)
            pred, pred_s = _timed(lambda: predict(model, split.test))  # noqa: B023  called at once
            row = {"split": name, "model": model_name.strip(), **summary(pred, true, groups, weights)}
            row["train_s"] = round(train_s, 2)
            row["predict_programs_per_s"] = round(len(split.test) / max(pred_s, 1e-9), 1)
            rows.append(row)
    return rows


def format_benchmark(rows: list[dict], markdown: bool = False) -> str:
    """The benchmark table as fixed-width text, or as a markdown table."""
    cols = ["split", "model", "programs", *METRICS, "train_s", "predict_programs_per_s"]
    head = ["split", "model", "programs", "MAPE", "<=10%", "<=25%", "RMSE(log)", "tau", "top-1", "top-5",
            "best p/m", "slope", "best spd", "train s", "pred/s"]

    def cell(r, c):
        v = r[c]
        if c in ("mape", "within_10", "within_25"):
            return f"{100 * v:.1f}%"
        if isinstance(v, float):
            return f"{v:.3f}" if c in METRICS else f"{v:.1f}"
        return str(v)

    return render_table(head, [[cell(r, c) for c in cols] for r in rows], markdown)


def write_benchmark(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    """Write ``benchmark.csv`` and ``benchmark.md`` into ``out_dir``; returns their paths."""
    return write_csv_and_markdown(rows, out_dir, "benchmark", format_benchmark(rows, markdown=True))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench table``'s arguments."""
    parser.add_argument("-d", "--dataset", required=True, help="one dataset (or device) folder")
    parser.add_argument("--holdout", default="auto",
                        help="networks held out in turn, comma-separated ('auto': every network with programs)")
    parser.add_argument("--output", default="runs/benchmark", help="folder for benchmark.csv, benchmark.md and logs")
    parser.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    parser.add_argument("--no-random-split", action="store_true", help="skip the random split")
    parser.add_argument("--no-ablation", action="store_true", help="skip the no-positional-encoding run")
    parser.add_argument("--access-ablation", action="store_true",
                        help="also train the transformer without the buffer-access features")
    add_model_arguments(parser)


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench table``: train, score, print the table and write it."""
    mcfg, tcfg = model_configs(args)
    out = Path(args.output)
    cfg = BenchmarkConfig(
        holdouts=None if args.holdout == "auto" else [h for h in args.holdout.split(",") if h],
        random_split=not args.no_random_split,
        positional_encoding_ablation=not args.no_ablation,
        access_ablation=args.access_ablation,
        model=mcfg,
        train=tcfg,
        log_dir=out / "logs",
    )
    rows = run_benchmark(Path(args.dataset), cfg, Path(args.cache))
    print(format_benchmark(rows))
    csv_path, md_path = write_benchmark(rows, out)
    print(f"written: {csv_path}, {md_path}")
    return 0
