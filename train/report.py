"""What a training or an evaluation reports: metric tables, task weights and the model card.

One implementation for a checkpoint of one device and for one with a device table
(several devices): the metric rows are those of :func:`cdmpp.train.metrics.summary`,
and a device table is the same columns with the device in front.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np

from cdmpp.checkpoint import WEIGHTS_FILE, checkpoint_meta
from cdmpp.model import ModelConfig
from cdmpp.predictor import DEFAULT_CHECKPOINT
from cdmpp.schema import tasks_of

from .config import describe_loss
from .folds import fold_networks, parse_fold

BASELINE_FILE = "tree_baseline.json"
CARD_FILE = "README.md"

_NAN = float("nan")


def _pct(key: str) -> Callable[[dict], str]:
    return lambda r: f"{100 * r.get(key, _NAN):.1f}%"


def _count(value) -> str:
    return str(int(value)) if np.isfinite(value) else "-"


def _num(key: str) -> Callable[[dict], str]:
    return lambda r: f"{r.get(key, _NAN):.3f}"


# header, cell of a metric row, width in the text table
CELLS: dict[str, tuple[str, Callable[[dict], str], int]] = {
    "programs": ("programs", lambda r: f"{r['programs']:d}", 9),
    "mape": ("MAPE", _pct("mape"), 9),
    "within_10": ("<=10%", _pct("within_10"), 8),
    "within_25": ("<=25%", _pct("within_25"), 8),
    "off_2x": (">2x off", _pct("off_2x"), 9),
    "rmse_log": ("RMSE(log)", _num("rmse_log"), 11),
    "kendall_tau": ("tau", _num("kendall_tau"), 8),
    "top1": ("top-1", _num("top1"), 8),
    "top5": ("top-5", _num("top5"), 8),
    "pairwise": ("pairwise", _num("pairwise"), 10),
    "best_ratio": ("best p/m", _num("best_ratio"), 10),
    "decile_log_ratio": ("fast 1/10", lambda r: f"{r.get('decile_log_ratio', _NAN):+.2f}", 11),
    "slow_half_log_ratio": ("slow 1/2", lambda r: f"{r.get('slow_half_log_ratio', _NAN):+.2f}", 10),
    "slope": ("slope", _num("slope"), 8),
    "best_speed": ("best spd", _num("best_speed"), 10),
    "top1_of_8": ("top-1 of 8", _num("top1_of_8"), 12),
    "tau_fast_half": ("tau fast 1/2", _num("tau_fast_half"), 14),
    "untunable_tasks": ("1-prog tasks", lambda r: _count(r.get("untunable_tasks", _NAN)), 14),
    "untunable_level": ("1-prog lvl", lambda r: f"{r.get('untunable_level', _NAN):+.2f}", 12),
    "untunable_within": ("1-prog <=1.25x", _pct("untunable_within"), 16),
    "tunable_within": ("task lvl <=1.25x", _pct("tunable_within"), 18),
}
TEXT_COLUMNS = ("programs", "mape", "within_10", "within_25", "rmse_log", "kendall_tau", "top1", "top5",
                "best_ratio", "decile_log_ratio", "slow_half_log_ratio", "slope", "best_speed", "top1_of_8",
                "tau_fast_half", "untunable_tasks", "untunable_level", "untunable_within", "tunable_within")
DEVICE_COLUMNS = ("programs", "mape", "within_25", "off_2x", "rmse_log", "kendall_tau", "top1", "top5", "pairwise",
                  "best_ratio", "decile_log_ratio", "slow_half_log_ratio", "slope", "best_speed", "top1_of_8",
                  "tau_fast_half", "untunable_tasks", "untunable_level", "untunable_within", "tunable_within")


def format_table(rows: Mapping[str, dict], title: str) -> str:
    """A fixed-width text table of metric rows (one per model), under ``title``.

    The last seven columns are the fast end (:func:`~cdmpp.train.metrics.fast_end`):
    ``best p/m``, the median predicted / measured latency of each task's fastest
    program; ``fast 1/10`` and ``slow 1/2``, the median over tasks of the mean
    log(predicted / measured) of each task's fastest tenth and slowest half (a model
    squeezed toward each task's middle: above 0, below 0); ``slope``, the within-task
    slope of log(predicted) on log(measured);
    ``best spd``, the mean measured-best / measured latency of the predicted best;
    ``top-1 of 8``, the same among each task's 8 fastest programs; and ``tau fast 1/2``,
    the Kendall tau within each task's fastest half.  The last four split the tasks by
    kernel class (:func:`~cdmpp.train.metrics.task_levels`): ``1-prog tasks``, the tasks
    with one program (untunable), ``1-prog lvl`` their mean log(predicted / measured),
    ``1-prog <=1.25x`` the share of them placed within 1.25x, and ``task lvl <=1.25x``
    the same share over the tasks with several programs (each task's mean log ratio).
    """
    head = f"{'model':<28}" + "".join(f"{CELLS[c][0]:>{CELLS[c][2]}}" for c in TEXT_COLUMNS)
    lines = [title, head, "-" * len(head)]
    for name, r in rows.items():
        lines.append(f"{name:<28}" + "".join(f"{CELLS[c][1](r):>{CELLS[c][2]}}" for c in TEXT_COLUMNS))
    return "\n".join(lines)


def device_rows_markdown(by_device: Mapping[str, Mapping[str, dict]], label: str = "device") -> list[str]:
    """Markdown lines of per-device metric rows: ``{row name: {model: row}}`` (``label``:
    the first column's heading, e.g. ``"task"`` for rows per task)."""
    lines = [
        f"| {label} | model | " + " | ".join(CELLS[c][0] for c in DEVICE_COLUMNS) + " |",
        "| --- | --- | " + " | ".join("---:" for _ in DEVICE_COLUMNS) + " |",
    ]
    for row_name, rows in by_device.items():
        for name, r in rows.items():
            lines.append(f"| {row_name} | {name} | " + " | ".join(CELLS[c][1](r) for c in DEVICE_COLUMNS) + " |")
    return lines


def format_device_table(rows: Mapping[str, Mapping[str, dict]], title: str, label: str = "device") -> str:
    """A markdown table of per-device metric rows, under ``title`` (``label``: the first
    column's heading)."""
    return "\n".join([title, "", *device_rows_markdown(rows, label)])


def task_weights(manifests: Mapping[str, dict], workload_keys: list[str], network: str | None,
                 qualified: bool = False) -> dict[int, float]:
    """Task weight of each workload index (in ``network``, or summed over all networks).

    Args:
        manifests: ``{row name: manifest}`` (:attr:`cdmpp.device.DeviceDescriptor.row_name`);
            one entry for a device folder.
        workload_keys: the key of each workload index; with ``qualified``, keys are
            ``"<row name>:<key>"`` (a corpus of several devices).
    """
    index_of = {k: i for i, k in enumerate(workload_keys)}
    members = {network}
    if parse_fold(network) is not None:  # a leave-family-out fold: the task weights of its networks
        members = set(fold_networks({t.network for m in manifests.values() for t in tasks_of(m)}, network))
    out: dict[int, float] = {}
    for name, manifest in manifests.items():
        for t in tasks_of(manifest):
            i = index_of.get(f"{name}:{t.workload_key}" if qualified else t.workload_key)
            if i is not None and (network is None or t.network in members):
                out[i] = out.get(i, 0.0) + float(t.weight)
    return out


def checkpoint_line(checkpoint: Path | None) -> str:
    """The first line of every table written for the record: which checkpoint it scores (its
    folder and the first 12 hex digits of the SHA-256 of its weights), so that a reader
    never has to ask which model a number is about.  ``None``: the shipped checkpoint."""
    folder = Path(checkpoint) if checkpoint is not None else DEFAULT_CHECKPOINT
    weights = folder / WEIGHTS_FILE
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:12] if weights.is_file() else "no weights"
    try:
        shown = folder.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        shown = folder
    return f"Checkpoint: `{shown}` (weights sha256 {digest})"


def write_rows(rows: Mapping, path: Path, table: str | None = None, checkpoint: Path | None = None) -> None:
    """Write metric rows as JSON to ``path``; with ``table``, also ``path`` with ``.md``: the
    :func:`checkpoint_line` of ``checkpoint``, a blank line and the table."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    if table is not None:
        path.with_suffix(".md").write_text(f"{checkpoint_line(checkpoint)}\n\n{table}\n", encoding="utf-8")


_ARCHITECTURE = (
    "Predicts the latency (seconds) of a scheduled TensorIR PrimFunc on {what}, from its compact AST "
    "(CDMPP, EuroSys 2024, sections 3-4){and_device}: a transformer encoder over the feature vectors of "
    "{tokens}, with a sinusoidal encoding of their pre-order positions; {head}."
)


ADAPTED_HEADING = "\n## Adapted: "
"""The start of each section that ``cdmpp adapt`` appends to a model card (one per device)."""


def adapted_sections(card: str) -> str:
    """The sections that ``cdmpp adapt`` appended to the model card text ``card``, in their
    order (empty when there is none): a card written again keeps them."""
    parts, at = [], card.find(ADAPTED_HEADING)
    while at >= 0:
        end = card.find("\n## ", at + len(ADAPTED_HEADING))
        parts.append(card[at:end] if end >= 0 else card[at:])
        at = card.find(ADAPTED_HEADING, end) if end >= 0 else -1
    return "".join(p.rstrip("\n") + "\n" for p in parts)


def model_card(model_config: ModelConfig, meta: dict, program_counts: Mapping[str, int] | None = None,
               benchmark_table: str | None = None) -> str:
    """The checkpoint's model card (markdown): its data, its recipe and its evaluation.

    Args:
        meta: the checkpoint's metadata; with a ``devices`` list it is a checkpoint with
            a device table (several devices), else a checkpoint of one device.
        program_counts: programs per network (one device), listed under "Data".
        benchmark_table: markdown of ``cdmpp bench table``, embedded when given.
    """
    several = "devices" in meta
    lines = [
        "# Model card: cdmpp latency transformer" + (", one model for every measured device" if several else ""),
        "",
        _ARCHITECTURE.format(
            what="a device" if several else "the device below",
            and_device=" and the device" if several else "",
            tokens=_token_words(model_config),
            head=_head_words(model_config, several),
        ),
        "",
        *(_device_data(meta) if several else _one_device_data(meta, program_counts or {})),
        "",
        "## Recipe",
        f"- Model: `{json.dumps(asdict(model_config))}`",
        f"- Training: `{json.dumps(meta['train_config'])}`; loss: {describe_loss(meta['train_config'])}"
        + _cmd_clause(meta) + "; AdamW",
        f"- Wall time on {_machine_words(meta.get('trained_on'))}: "
        f"{meta['train_seconds']['transformer']} s (tree baseline {meta['train_seconds']['tree_baseline']} s)",
    ]
    if model_config.trace_tokens:
        lines.append(
            "- Inputs: each program's schedule trace (tile sizes, unroll depth, parallel and vectorize extents, "
            "primitive counts; `cdmpp.featurize.trace`) as one more token before its leaves"
            + (f"; trace dropout {meta['train_config'].get('trace_dropout')}: that share of training programs is seen "
               "without the token, so a program without a trace (a bare PrimFunc) is predicted from its "
               + ("leaves and loops" if model_config.loop_tokens else "leaves alone")
               if model_config.trace_optional else "; every prediction needs the program's trace")
        )
    if model_config.loop_tokens:
        lines.append("- Inputs: every loop of the compact AST as a token among the leaves, in pre-order "
                     "(`cdmpp.featurize.loops`: kind, extent, depth, enclosed iterations, stores and loops, annotations)")
    if model_config.pooling == "lse":
        lines.append("- Head: a latency term per token, the program's log-latency their log-sum-exp (a program's time "
                     "is the sum of its statements' times)")
    if several:
        lines.append("- The tree baseline (XGBoost) trains on the same programs, with the device descriptor appended "
                     "to the summed `PerStoreFeature` rows.")
    else:
        lines.append(
            "- The recipe's defaults are the shipped checkpoint's, chosen on validation workloads "
            "(RESULTS.md, \"What limits the model\"), never on the held-out network."
        )
    lines += _metric_sections(meta, several)
    if benchmark_table:
        lines += ["", "## Benchmark (`cdmpp bench table`, same data, splits and seed for every model)", "",
                  benchmark_table.strip()]
    lines += _interval_section(meta.get("interval"))
    if meta.get("interval_without_trace"):
        lines += _interval_section(meta["interval_without_trace"], "Prediction intervals of programs without a trace")
    return "\n".join(lines) + "\n"


def _token_words(model_config: ModelConfig) -> str:
    """The tokens the encoder reads, for the architecture sentence."""
    words = "its leaves and its loops" if model_config.loop_tokens else "its leaves"
    return ("its schedule trace, " + words) if model_config.trace_tokens else words


def _head_words(model_config: ModelConfig, several: bool) -> str:
    """How the token embeddings become a latency: the end of the architecture sentence."""
    device = "the device's vector (a learned embedding plus a linear map of its descriptor)"
    if model_config.pooling == "lse":
        return ("an MLP maps each encoded token" + (f", with {device}," if several else "")
                + " to a latency term, and the program's log-latency is the log-sum-exp of the terms")
    return (f"the tokens are {model_config.pooling}-pooled" + (f" and joined with {device}" if several else "")
            + ", and an MLP maps the result to the log-latency")


def _machine_words(machine: dict | None) -> str:
    """The training machine in words, from the metadata's ``trained_on``."""
    if not machine:
        return "the training machine"
    gpu = f", GPU {machine['gpu']}" if machine.get("gpu") else ", no GPU"
    return f"the training machine, {machine['model']} with {machine['cores']} cores (`{machine['device_id']}`){gpu}"


def _cmd_clause(meta: dict) -> str:
    cfg = meta["train_config"]
    if not cfg.get("cmd_weight") or "devices" in meta:
        return ""
    target_device = meta.get("cmd_target_device")
    domain = (f"all programs of device `{target_device}`" if target_device
              else f"{cfg.get('cmd_domain', 'holdout').replace('heldout', 'holdout').replace('holdout', 'held-out')} programs")
    return f" plus {cfg['cmd_weight']} x CMD between the embeddings of training programs and {domain} (features only)"


def _one_device_data(meta: dict, program_counts: Mapping[str, int]) -> list[str]:
    pooled = meta.get("pooled_devices")
    return [
        "## Data",
        f"- Dataset `{meta['dataset']}`, device `{meta['device_id']}` "
        f"({meta['device'].get('model', '?')}, {meta['device'].get('cores', '?')} cores, "
        f"target `{json.dumps(meta['device'].get('target', {}))}`)",
        f"- Trained on {meta['train_programs']} programs, validated on {meta['val_programs']} "
        f"(held-out network: {meta['holdout'] or 'none'}, {meta['test_programs']} test programs)",
        *(
            ["- Pooled into training, labels as measured and no device feature: "
             + ", ".join(f"{p['programs']} programs of device `{p['device_id']}`" for p in pooled)
             + " (their programs of the held-out and validation workloads left out)"]
            if pooled else []
        ),
        "- Programs per network (a task shared by networks counts in each): "
        + ", ".join(f"{n} {c}" for n, c in program_counts.items()),
        "- Labels: median of 10 timing repeats, measured by `cdmpp collect` (see the dataset card)",
    ]


def _device_data(meta: dict) -> list[str]:
    lines = ["## Devices", "", "| row | device | model | cores | ISA | target | programs | in training |",
             "| ---: | --- | --- | ---: | --- | --- | ---: | ---: |"]
    for d in checkpoint_meta(meta).devices:
        desc = d.descriptor
        lines.append(
            f"| {d.row} | `{d.device_id}`{'' if d.protocol == 'cold' else ' (' + d.protocol + ')'} | {desc.get('model', '?')} | {desc.get('cores', '?')} | "
            f"{desc.get('isa', '?')} | `{json.dumps(desc.get('target', {}))}` | {d.programs} | {d.train_programs} |"
        )
    if meta.get("split", "network") == "network":
        split = (
            (f"- Held-out network: {meta['holdout']} (its workloads out of training on every device; "
             f"{meta['test_programs']} test programs). " if meta["holdout"] else "- Held-out network: none. ")
            + f"Validation: a tenth of the other workloads, on every device ({meta['val_programs']} programs). "
            f"Training: {meta['train_programs']} programs."
        )
    else:
        split = (
            f"- Split: {meta['split']} ({meta['test_programs']} test programs, {meta['val_programs']} validation "
            f"programs, {meta['train_programs']} training programs"
            + (f"; programs left by each filter: `{json.dumps(meta['split_filters'])}`" if meta.get("split_filters")
               else "")
            + ")"
        )
    return lines + [
        "",
        "Row 0 is the unknown device: with a device's descriptor it is the zero-shot guess for a device not in "
        "the table (`cdmpp adapt` learns a row for one from a few measurements).",
        "",
        "## Data and split",
        f"- Dataset `{meta['dataset']}`; devices left out: {', '.join(meta['excluded_devices']) or 'none'}",
        split,
        "- Labels: median of 10 timing repeats, measured by `cdmpp collect` on each device (see the dataset cards)",
    ]


def _metric_sections(meta: dict, several: bool) -> list[str]:
    lines = []
    val, test = meta.get("validation_metrics"), meta.get("holdout_metrics", meta.get("heldout_metrics"))
    if several:
        if val:
            lines += ["", "## Validation workloads (every device)", "", *device_rows_markdown(val)]
        if meta.get("validation_metrics_without_trace"):
            lines += ["", "## Validation workloads without their traces (as bare PrimFuncs; transformer only)", "",
                      *device_rows_markdown(meta["validation_metrics_without_trace"])]
        if test:
            head = f"Held-out network {meta['holdout']}" if meta.get("split", "network") == "network" else "Test programs"
            lines += ["", f"## {head}", "", *device_rows_markdown(test)]
        return lines
    if val:
        lines += ["", "## Validation workloads", "", format_table(val, "validation workloads")]
    if test:
        lines += ["", "## Held-out network", "", format_table(test, meta["holdout"])]
    return lines


def _interval_section(cal: dict | None, heading: str = "Prediction intervals") -> list[str]:
    if not cal:
        return []
    val = cal.get("coverage", {}).get("validation", {}).get("all", {}).get(cal["method"], {})
    return [
        "",
        f"## {heading}",
        "",
        f"{100 * cal['lower']:.0f}-{100 * cal['upper']:.0f}% intervals: {cal['passes']} MC-dropout passes, "
        f"method `{cal['method']}` (alpha = {cal.get(cal['method'], {}).get('alpha')}), calibrated on "
        f"{cal['calibrated_on']} (`cdmpp bench calibrate`)."
        + (f" Coverage there: {100 * val['coverage']:.1f}%, median high / low {val['median_width_ratio']:.2f}."
           if val else ""),
    ]


def worst_tasks(corpus, index: np.ndarray, panels: dict, network: str | None, k: int = 3) -> list[str]:
    """Lines (of a :class:`cdmpp.train.devices.DeviceCorpus` scored on ``index``) naming the ``k`` tasks of each device whose programs are predicted worst
    (largest median absolute log error), with the median ratio predicted / measured."""
    names: dict[str, str] = {}
    for m in corpus.manifests.values():
        for t in tasks_of(m):  # the held-out network's own name of a workload first, else the first seen
            if network is None or parse_fold(network) or t.network == network:
                names.setdefault(t.workload_key, t.task_name)
        for t in tasks_of(m):
            names.setdefault(t.workload_key, f"{t.network} {t.task_name}")
    out = []
    for row, descriptor in enumerate(corpus.devices, start=1):
        if descriptor.row_name not in panels:
            continue
        sel = index[corpus.data.device_row[index] == row]
        pred, true, _ = panels[descriptor.row_name]
        ratio = np.log(pred / true)
        keys = corpus.raw_keys[sel]
        scored = []
        for key in np.unique(keys):
            r = ratio[keys == key]
            scored.append((float(np.median(np.abs(r))), key, int(r.size), float(np.exp(np.median(r)))))
        for err, key, n, med in sorted(scored, reverse=True)[:k]:
            out.append(f"- {descriptor.row_name}: {names.get(key, key)} ({n} programs): predicted {med:.2f}x the measured")
    return out
