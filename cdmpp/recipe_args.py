"""The model and training-recipe options shared by ``cdmpp train``, ``cdmpp evaluate`` and the
benchmarks that train models, and the configs they make."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .cli_flags import Flag
from .train.config import SWEEP_WORKLOADS, TrainConfig

if TYPE_CHECKING:
    from .model import ModelConfig


FLAGS = (
    Flag("--epochs", "train", "epochs", dict(type=int)),
    Flag("--batch-size", "train", "batch_size", dict(type=int)),
    Flag("--lr", "train", "lr", dict(type=float)),
    Flag("--d-model", "model", "d_model", dict(type=int, help="embedding width (default 192)")),
    Flag("--layers", "model", "n_layers", dict(type=int, help="encoder layers (default 3)")),
    Flag("--ff-dim", "model", "ff_dim", dict(type=int, help="feed-forward width of each encoder layer")),
    Flag(
        "--dropout",
        "model",
        "dropout",
        dict(type=float, help="dropout rate of the encoder layers (prediction intervals need it above 0)"),
    ),
    Flag("--weight-decay", "train", "weight_decay", dict(type=float, help="AdamW weight decay")),
    Flag(
        "--device-dropout",
        "train",
        "device_dropout",
        dict(type=float, help="share of training programs scored with the unknown-device row (several devices)"),
    ),
    Flag(
        "--pooling",
        "model",
        "pooling",
        dict(
            choices=["sum", "mean", "max", "lse"],
            help="how the head reads the tokens: sum, mean or max of them, or lse (a latency term per token, log-sum-exp over them; the default)",
        ),
    ),
    Flag(
        "--no-pe",
        "model",
        "positional_encoding",
        dict(action="store_true", help="drop the pre-order positional encoding (ablation)"),
    ),
    Flag(
        "--loop-tokens",
        "model",
        "loop_tokens",
        dict(
            action=argparse.BooleanOptionalAction,
            help="every loop of the compact AST as a token among the leaves, in pre-order (kind, extent, depth, what it encloses, annotations; default on)",
        ),
    ),
    Flag(
        "--tree-attention",
        "model",
        "tree_attention",
        dict(
            action="store_true",
            help="with loop tokens (implied): a learned attention bias per head along the compact AST's parent-child edges",
        ),
    ),
    Flag(
        "--tree-gnn",
        "model",
        "tree_gnn",
        dict(
            type=int,
            metavar="LAYERS",
            help="with loop tokens: this many GATv2 layers of message passing along the compact AST's parent-child edges before the encoder (PyTorch Geometric; default 0)",
        ),
    ),
    Flag(
        "--roofline",
        "model",
        "roofline",
        dict(
            action=argparse.BooleanOptionalAction,
            help="the level from physics: predict the program's roofline bound on the device (FLOPs and bytes over the descriptor's peak rates, learned per device) times a learned inefficiency >= 1",
        ),
    ),
    Flag(
        "--cache-fit",
        "model",
        "cache_fit",
        dict(
            action=argparse.BooleanOptionalAction,
            help="every leaf also reads its working sets against the device's L1/L2/L3, its vector width against the ISA's and its parallel extent against the cores",
        ),
    ),
    Flag(
        "--trace-tokens",
        "model",
        "trace_tokens",
        dict(
            action=argparse.BooleanOptionalAction,
            help="each program's schedule-trace decisions as one more token beside its leaves (default on; a dataset folder of device folders; the checkpoint then predicts from Schedules or tuning records, and from bare PrimFuncs too with trace dropout)",
        ),
    ),
    Flag(
        "--trace-dropout",
        "train",
        "trace_dropout",
        dict(
            type=float,
            help="share of training programs seen without their trace token (default 0.2), so that the checkpoint also predicts bare PrimFuncs from their leaves alone; 0: it always needs the trace",
        ),
    ),
    Flag(
        "--precision",
        "train",
        "precision",
        dict(
            choices=["32-true", "bf16-mixed", "auto"],
            help="training precision (default 32-true; auto: bf16 autocast where the CPU has AVX-512 BF16 or on a GPU with bf16)",
        ),
    ),
    Flag("--seed", "train", "seed", dict(type=int)),
    Flag("--rank-weight", "train", "rank_weight", dict(type=float, help="weight of the within-task ranking term")),
    Flag("--task-group", "train", "task_group", dict(type=int, help="programs of one task per batch group")),
    Flag(
        "--length-pool",
        "train",
        "length_pool",
        dict(
            type=int,
            help="batches of programs of similar token count, drawn from pools of this many batches (0, the default: programs shuffled freely); about half the epoch time, at a cost in accuracy (RESULTS.md, Training speed)",
        ),
    ),
    Flag(
        "--within-weight",
        "train",
        "within_weight",
        dict(
            type=float,
            help="weight of the within-task term (each program's deviation from its task's batch mean; needs --task-group)",
        ),
    ),
    Flag(
        "--listmle-weight",
        "train",
        "listmle_weight",
        dict(
            type=float,
            help="weight of the within-task listwise term (ListMLE, fastest first, the fast end weighted most; needs --task-group)",
        ),
    ),
    Flag(
        "--fast-weight",
        "train",
        "fast_weight",
        dict(
            type=float,
            help="the level loss weighs each task's fastest tenth of training programs 1 + this many times (default 0: every program alike)",
        ),
    ),
    Flag(
        "--workload-weight",
        "train",
        "workload_weight",
        dict(
            type=float,
            help="in [0, 1]: the level loss weighs each training program n^-W, n its task's training programs (1: every workload alike, an untunable task's one program as much as a tunable task's whole set; default 0: every program alike)",
        ),
    ),
    Flag(
        "--huber-delta",
        "train",
        "huber_delta",
        dict(type=float, help="Huber loss with this threshold (standardised log-latency; default 0.1); 0: the MSE"),
    ),
    Flag(
        "--cmd-weight",
        "train",
        "cmd_weight",
        dict(
            type=float,
            help="weight of the CMD domain-adaptation term; its target domain is the held-out programs' features (or, for train, those of --cmd-target)",
        ),
    ),
    Flag(
        "--cmd-domain",
        "train",
        "cmd_domain",
        dict(
            choices=["holdout", "validation"],
            help="the CMD term's unlabelled programs without --cmd-target: the held-out network's (holdout, the default) or the validation workloads' (validation: to choose --cmd-weight on validation workloads)",
        ),
    ),
    Flag(
        "--train-share",
        "train",
        "train_share",
        dict(
            type=float,
            help="train on this share of each training task's programs (at least one per task; validation and test untouched): the data-scaling curve",
        ),
    ),
    Flag(
        "--max-repeat-cv",
        "train",
        "max_repeat_cv",
        dict(
            type=float,
            help="leave training programs whose timing repeats vary by more than this (std / mean) out of training (several device folders)",
        ),
    ),
    Flag(
        "--sweep-workloads",
        "train",
        "sweep_workloads",
        dict(
            choices=SWEEP_WORKLOADS,
            help="which of the operator sweep's own workloads train (several device folders): all, only its untunable tasks (one program), or none (default all)",
        ),
    ),
    Flag(
        "--sweep-weight",
        "train",
        "sweep_weight",
        dict(
            type=float,
            help="the level loss weighs each training program of the operator sweep's own workloads this many times, every other program once (several device folders; default 1)",
        ),
    ),
)
"""Every recipe option, once: its flag, the config and field it sets, and its argparse
options.  :func:`add_model_arguments` adds them and :func:`model_configs` reads them back, so
a new field of :class:`ModelConfig` or :class:`TrainConfig` is one row here.  ``--no-pe`` sets
``positional_encoding`` to False, and ``--tree-attention`` implies loop tokens."""


def add_model_arguments(s: argparse.ArgumentParser) -> None:
    """Add the model and training-recipe options (:data:`FLAGS`) to ``s``; an option left out
    is ``None`` and keeps the dataclass default."""
    for f in FLAGS:
        s.add_argument(f.flag, default=None, **f.options)


def model_configs(args: argparse.Namespace) -> tuple[ModelConfig, TrainConfig]:
    """The :class:`ModelConfig` and :class:`TrainConfig` of parsed :func:`add_model_arguments`
    options; an option left out keeps the dataclass default (the default recipe).

    Raises:
        InputError: a setting the configs refuse (named).
    """
    from .model import ModelConfig  # noqa: PLC0415  (keeps torch off the command line's import)

    given: dict[str, dict] = {"model": {}, "train": {}}
    for f in FLAGS:
        value = getattr(args, f.dest, None)
        if f.flag == "--no-pe":
            value = False if value else None
        elif f.flag == "--tree-attention":
            value = True if value else None
            if value:
                given["model"]["loop_tokens"] = True
        if value is not None:
            given[f.config].setdefault(f.field, value)
    return ModelConfig(**given["model"]), TrainConfig(**given["train"])
