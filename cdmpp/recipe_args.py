"""The model and training-recipe options shared by ``cdmpp train``, ``cdmpp evaluate`` and the
benchmarks that train models, and the configs they make."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .train.config import TrainConfig

if TYPE_CHECKING:
    from .model import ModelConfig



def add_model_arguments(s: argparse.ArgumentParser) -> None:
    """Add the model and training-recipe options (``--epochs``, ``--d-model``, ...) to ``s``;
    their defaults (``None``) come from :class:`ModelConfig` and :class:`TrainConfig`."""
    s.add_argument("--epochs", type=int, default=None)
    s.add_argument("--batch-size", type=int, default=None)
    s.add_argument("--lr", type=float, default=None)
    s.add_argument("--d-model", type=int, default=None, help="embedding width (default 192)")
    s.add_argument("--layers", type=int, default=None, help="encoder layers (default 3)")
    s.add_argument("--ff-dim", type=int, default=None, help="feed-forward width of each encoder layer")
    s.add_argument("--dropout", type=float, default=None, help="dropout rate of the encoder layers (prediction intervals need it above 0)")
    s.add_argument("--weight-decay", type=float, default=None, help="AdamW weight decay")
    s.add_argument("--device-dropout", type=float, default=None,
                   help="share of training programs scored with the unknown-device row (several devices)")
    s.add_argument("--pooling", choices=["sum", "mean", "max", "lse"], default=None,
                   help="how the head reads the tokens: sum, mean or max of them, or lse (a latency term per token, "
                   "log-sum-exp over them; the default)")
    s.add_argument("--no-pe", action="store_true", help="drop the pre-order positional encoding (ablation)")
    s.add_argument("--loop-tokens", action=argparse.BooleanOptionalAction, default=None,
                   help="every loop of the compact AST as a token among the leaves, in pre-order (kind, extent, "
                   "depth, what it encloses, annotations; default on)")
    s.add_argument("--tree-attention", action="store_true",
                   help="with loop tokens (implied): a learned attention bias per head along the compact AST's "
                   "parent-child edges")
    s.add_argument("--tree-gnn", type=int, default=None, metavar="LAYERS",
                   help="with loop tokens: this many GATv2 layers of message passing along the compact AST's "
                   "parent-child edges before the encoder (PyTorch Geometric; default 0)")
    s.add_argument("--roofline", action=argparse.BooleanOptionalAction, default=None,
                   help="the level from physics: predict the program's roofline bound on the device (FLOPs and bytes "
                   "over the descriptor's peak rates, learned per device) times a learned inefficiency >= 1")
    s.add_argument("--cache-fit", action=argparse.BooleanOptionalAction, default=None,
                   help="every leaf also reads its working sets against the device's L1/L2/L3, its vector width "
                   "against the ISA's and its parallel extent against the cores")
    s.add_argument("--trace-tokens", action=argparse.BooleanOptionalAction, default=None,
                   help="each program's schedule-trace decisions as one more token beside its leaves (default on; a "
                   "dataset folder of device folders; the checkpoint then predicts from Schedules or tuning records, "
                   "and from bare PrimFuncs too with trace dropout)")
    s.add_argument("--trace-dropout", type=float, default=None,
                   help="share of training programs seen without their trace token (default 0.2), so that the "
                   "checkpoint also predicts bare PrimFuncs from their leaves alone; 0: it always needs the trace")
    s.add_argument("--precision", choices=["32-true", "bf16-mixed", "auto"], default=None,
                   help="training precision (default 32-true; auto: bf16 autocast where the CPU has AVX-512 BF16 or "
                   "on a GPU with bf16)")
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--rank-weight", type=float, default=None, help="weight of the within-task ranking term")
    s.add_argument("--task-group", type=int, default=None, help="programs of one task per batch group")
    s.add_argument("--length-pool", type=int, default=None,
                   help="batches of programs of similar token count, drawn from pools of this many batches "
                        "(0, the default: programs shuffled freely); about half the epoch time, at a cost in "
                        "accuracy (RESULTS.md, Training speed)")
    s.add_argument("--within-weight", type=float, default=None,
                   help="weight of the within-task term (each program's deviation from its task's batch mean; "
                   "needs --task-group)")
    s.add_argument("--listmle-weight", type=float, default=None,
                   help="weight of the within-task listwise term (ListMLE, fastest first, the fast end weighted "
                   "most; needs --task-group)")
    s.add_argument("--fast-weight", type=float, default=None,
                   help="the level loss weighs each task's fastest tenth of training programs 1 + this many times "
                   "(default 0: every program alike)")
    s.add_argument("--workload-weight", type=float, default=None,
                   help="in [0, 1]: the level loss weighs each training program n^-W, n its task's training "
                   "programs (1: every workload alike, an untunable task's one program as much as a tunable "
                   "task's whole set; default 0: every program alike)")
    s.add_argument("--huber-delta", type=float, default=None,
                   help="Huber loss with this threshold (standardised log-latency; default 0.1); 0: the MSE")
    s.add_argument(
        "--cmd-weight",
        type=float,
        default=None,
        help="weight of the CMD domain-adaptation term; its target domain is the held-out programs' features "
        "(or, for train, those of --cmd-target)",
    )
    s.add_argument(
        "--cmd-domain",
        choices=["heldout", "validation"],
        default=None,
        help="the CMD term's unlabelled programs without --cmd-target: the held-out network's (heldout, the "
        "default) or the validation workloads' (validation: to choose --cmd-weight on validation workloads)",
    )


def model_configs(args: argparse.Namespace) -> tuple[ModelConfig, TrainConfig]:
    """The :class:`ModelConfig` and :class:`TrainConfig` of parsed :func:`add_model_arguments`
    options; an option left out keeps the dataclass default (the default recipe)."""
    from .model import ModelConfig  # noqa: PLC0415  (keeps torch off the command line's import)

    def given(**kw):
        return {k: v for k, v in kw.items() if v is not None}

    pe = False if args.no_pe else None
    model = ModelConfig(
        **given(
            d_model=args.d_model,
            n_layers=args.layers,
            ff_dim=args.ff_dim,
            dropout=args.dropout,
            pooling=args.pooling,
            positional_encoding=pe,
            trace_tokens=getattr(args, "trace_tokens", None),
            loop_tokens=True if getattr(args, "tree_attention", False) else getattr(args, "loop_tokens", None),
            tree_attention=True if getattr(args, "tree_attention", False) else None,
            tree_gnn=getattr(args, "tree_gnn", None),
            roofline=getattr(args, "roofline", None),
            cache_fit=getattr(args, "cache_fit", None),
        )
    )
    train = TrainConfig(
        **given(
            epochs=args.epochs,
            batch_size=args.batch_size,
            lr=args.lr,
            seed=args.seed,
            rank_weight=args.rank_weight,
            task_group=args.task_group,
            cmd_weight=args.cmd_weight,
            cmd_domain=args.cmd_domain,
            device_dropout=args.device_dropout,
            weight_decay=args.weight_decay,
            train_share=getattr(args, "train_share", None),
            within_weight=args.within_weight,
            listmle_weight=getattr(args, "listmle_weight", None),
            fast_weight=getattr(args, "fast_weight", None),
            workload_weight=getattr(args, "workload_weight", None),
            huber_delta=args.huber_delta,
            max_repeat_cv=getattr(args, "max_repeat_cv", None),
            trace_dropout=getattr(args, "trace_dropout", None),
            precision=getattr(args, "precision", None),
            length_pool=getattr(args, "length_pool", None),
        )
    )
    return model, train
