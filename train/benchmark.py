"""``cdmpp evaluate --benchmark``: every model on the same splits, data and seed.

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

import csv
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cdmpp.featurize.ast import OWN_FEATURES
from cdmpp.model import ModelConfig
from cdmpp.predictor import LatencyPredictor

from .baselines import FlopsBaseline, SegmentSumMLP, TreeBaseline
from .config import TrainConfig
from .evaluate import load_featurized
from .metrics import summary
from .report import task_weights
from .splits import Split, holdout_network, networks_of, random_programs

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
    from .fit import fit_transformer  # noqa: PLC0415  (Lightning: off the table path)
    from .lightning import cmd_domain_programs  # noqa: PLC0415  (keeps lightning off this module's import)

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


def render_table(head: list[str], body: list[list[str]], markdown: bool = False, left: int = 2) -> str:
    """Cells as a fixed-width text table, or a markdown table; the first ``left`` columns are left-aligned."""
    if markdown:
        rule = "|" + "|".join(" --- " if i < left else " ---: " for i in range(len(head))) + "|"
        return "\n".join(["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    fmt = lambda vals: "  ".join(v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([fmt(head), "-" * len(fmt(head)), *(fmt(b) for b in body)])


def write_csv_and_markdown(rows: list[dict], out_dir: Path, stem: str, markdown: str) -> tuple[Path, Path]:
    """Write ``rows`` to ``out_dir/<stem>.csv`` and ``markdown`` to ``out_dir/<stem>.md``; returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out_dir / f"{stem}.csv", out_dir / f"{stem}.md"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["split", "model"])
        w.writeheader()
        w.writerows(rows)
    md_path.write_text(markdown + "\n", encoding="utf-8")
    return csv_path, md_path


def write_benchmark(rows: list[dict], out_dir: Path) -> tuple[Path, Path]:
    """Write ``benchmark.csv`` and ``benchmark.md`` into ``out_dir``; returns their paths."""
    return write_csv_and_markdown(rows, out_dir, "benchmark", format_benchmark(rows, markdown=True))
