"""The fit study's levers: each a change of the training recipe, tried on one split and seed
(``cdmpp bench fit-study --levers ...``)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Lever:
    """One change of the training recipe.

    Attributes:
        name: short name (a table row).
        description: what it changes, in words.
        model: :class:`~cdmpp.model.ModelConfig` fields it sets.
        train: :class:`~cdmpp.train.lightning.TrainConfig` fields it sets.
        trace_token: add the schedule trace's decisions as one more token before each
            program's leaves (:func:`cdmpp.featurize.trace.with_trace_tokens`).
        trace_sequence: add every instruction of the schedule trace as a token before each
            program's leaves (:func:`benchmarks.trace_steps.with_trace_sequence`; TLP's
            input), instead of the one token.
        extra_data: ``"tuned"``: add every tuned-phase program of the training workloads
            (:func:`cdmpp.train.devices.tuned_phase`) to the training programs;
            ``"random"``: add as many more programs of the other phases, drawn from the
            training workloads' programs the ``train_share`` left out (the control);
            ``""``: neither.
    """

    name: str
    description: str
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)
    trace_token: bool = False
    trace_sequence: bool = False
    extra_data: str = ""


LEVERS: dict[str, Lever] = {
    lever.name: lever
    for lever in (
        Lever("current", "the study's base: MSE on standardised log-latency over the leaves, mean-pooled, programs "
              "shuffled freely"),
        Lever("grouped", "batches of 16-program groups of one task (the batching the within-task terms need)",
              train={"task_group": 16}),
        Lever("within", "MSE plus the within-task term (weight 1), 16-program task groups",
              train={"task_group": 16, "within_weight": 1.0}),
        Lever("within-x4", "MSE plus the within-task term (weight 4), 16-program task groups",
              train={"task_group": 16, "within_weight": 4.0}),
        Lever("rank", "MSE plus RankNet's pairwise term (weight 1), 16-program task groups (TLP ranks)",
              train={"task_group": 16, "rank_weight": 1.0}),
        Lever("huber", "Huber loss (threshold 0.1 standard deviations) instead of the MSE",
              train={"huber_delta": 0.1}),
        Lever("stable-labels", "training programs whose repeats vary by more than 5% (CV) left out",
              train={"max_repeat_cv": 0.05}),
        Lever("no-dropout", "dropout 0 (intervals then need a deep ensemble or conformal calibration)",
              model={"dropout": 0.0}),
        Lever("wider", "4 layers, width 256, feed-forward 768", model={"n_layers": 4, "d_model": 256, "ff_dim": 768}),
        Lever("longer", "twice the epochs", train={"epochs": -2}),
        Lever("huber-rank", "Huber loss plus RankNet's pairwise term (weight 1), 16-program task groups",
              train={"huber_delta": 0.1, "task_group": 16, "rank_weight": 1.0}),
        Lever("huber-rank-0.3", "Huber loss plus RankNet's pairwise term (weight 0.3), 16-program task groups",
              train={"huber_delta": 0.1, "task_group": 16, "rank_weight": 0.3}),
        Lever("huber-longer", "Huber loss, twice the epochs", train={"huber_delta": 0.1, "epochs": -2}),
        Lever("huber-trace", "Huber loss, the schedule trace's decisions as one more token beside the leaves "
              "(TLP's input)", train={"huber_delta": 0.1}, trace_token=True),
        Lever("huber-rank-longer", "Huber loss plus RankNet's pairwise term (weight 0.3), 16-program task groups, "
              "twice the epochs", train={"huber_delta": 0.1, "task_group": 16, "rank_weight": 0.3, "epochs": -2}),
        Lever("huber-trace-lse", "huber-trace with the log-sum-exp head: a latency term per token, summed",
              model={"pooling": "lse"}, train={"huber_delta": 0.1}, trace_token=True),
        Lever("huber-trace-loops", "huber-trace with every loop of the compact AST as a token among the leaves",
              model={"loop_tokens": True}, train={"huber_delta": 0.1}, trace_token=True),
        Lever("huber-trace-loops-lse", "huber-trace-loops with the log-sum-exp head",
              model={"loop_tokens": True, "pooling": "lse"}, train={"huber_delta": 0.1}, trace_token=True),
        Lever("huber-trace-loops-tree", "huber-trace-loops with an attention bias per head along the compact AST's "
              "parent-child edges", model={"loop_tokens": True, "tree_attention": True}, train={"huber_delta": 0.1},
              trace_token=True),
        Lever("huber-trace-seq", "Huber loss, every schedule instruction with its decisions as a token before "
              "the leaves (TLP's sequence), instead of the one trace token", train={"huber_delta": 0.1},
              trace_sequence=True),
        Lever("huber-trace-tuned", "huber-trace, plus every tuned-phase program of the training workloads (the "
              "fast-end collection policy)", train={"huber_delta": 0.1}, trace_token=True, extra_data="tuned"),
        Lever("huber-trace-random", "huber-trace, plus as many more random and evolutionary programs of the "
              "training workloads (the control of huber-trace-tuned)", train={"huber_delta": 0.1}, trace_token=True,
              extra_data="random"),
        Lever("huber-trace-seq-loops", "huber-trace-seq with every loop of the compact AST as a token among the "
              "leaves", model={"loop_tokens": True}, train={"huber_delta": 0.1}, trace_sequence=True),
        Lever("huber-trace-pool", "huber-trace with training batches of programs of similar token count (pools of "
              "50 batches sorted by length), so that a batch pads less", train={"huber_delta": 0.1, "length_pool": 50},
              trace_token=True),
        Lever("huber-trace-loops-lse-pool", "huber-trace-loops-lse with training batches of programs of similar "
              "token count (pools of 50 batches)", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "length_pool": 50}, trace_token=True),
        Lever("huber-trace-loops-lse-bf16", "huber-trace-loops-lse trained with bf16 autocast "
              "(`--precision bf16-mixed`)", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "precision": "bf16-mixed"}, trace_token=True),
        # the fast-end levers, each on the base recipe (huber-trace-loops-lse)
        Lever("shipped-listmle", "huber-trace-loops-lse plus the within-task ListMLE term (weight 1, fastest first, "
              "the fast end weighted most), 16-program task groups", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 1.0}, trace_token=True),
        Lever("shipped-listmle-0.3", "shipped-listmle with weight 0.3", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.3}, trace_token=True),
        Lever("shipped-listmle-0.1", "shipped-listmle with weight 0.1", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.1}, trace_token=True),
        Lever("shipped-listmle-0.03", "shipped-listmle with weight 0.03 (the Huber term's gradient is at most 0.1 "
              "per program, so a larger weight spreads each task's predictions past the measured spread)",
              model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03}, trace_token=True),
        Lever("shipped-grouped", "huber-trace-loops-lse in 16-program task groups (the control of the ListMLE levers)",
              model={"loop_tokens": True, "pooling": "lse"}, train={"huber_delta": 0.1, "task_group": 16},
              trace_token=True),
        Lever("shipped-roofline", "huber-trace-loops-lse predicting the roofline bound times a learned inefficiency "
              ">= 1 (the level from physics)", model={"loop_tokens": True, "pooling": "lse", "roofline": True},
              train={"huber_delta": 0.1}, trace_token=True),
        Lever("shipped-roofline-listmle", "shipped-roofline plus the ListMLE term (weight 1), 16-program task groups",
              model={"loop_tokens": True, "pooling": "lse", "roofline": True},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 1.0}, trace_token=True),
        Lever("shipped-gnn", "huber-trace-loops-lse with 2 GATv2 layers along the compact AST's parent-child edges "
              "before the encoder (PyTorch Geometric)", model={"loop_tokens": True, "pooling": "lse", "tree_gnn": 2},
              train={"huber_delta": 0.1}, trace_token=True),
        Lever("shipped-cache-fit", "huber-trace-loops-lse with each leaf's working sets against the device's caches, "
              "its vector width against the ISA's and its parallel extent against the cores",
              model={"loop_tokens": True, "pooling": "lse", "cache_fit": True}, train={"huber_delta": 0.1},
              trace_token=True),
        Lever("shipped-tuned", "huber-trace-loops-lse plus every tuned-phase program of the training workloads",
              model={"loop_tokens": True, "pooling": "lse"}, train={"huber_delta": 0.1}, trace_token=True,
              extra_data="tuned"),
        Lever("shipped-tuned-listmle-0.03", "shipped-tuned plus the within-task ListMLE term at weight 0.03, "
              "16-program task groups (the two fast-end levers that won on the fold, together)",
              model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03}, trace_token=True,
              extra_data="tuned"),
        Lever("shipped-wide", "huber-trace-loops-lse at twice the width and depth (d_model 384, 6 layers, "
              "feed-forward 1024): capacity, for a GPU", model={"loop_tokens": True, "pooling": "lse", "d_model": 384,
                                                              "n_layers": 6, "ff_dim": 1024}, train={"huber_delta": 0.1},
              trace_token=True),
        Lever("shipped-fast-x4", "huber-trace-loops-lse with each task's fastest tenth of training programs weighted 5 "
              "times in the Huber loss (the level of the schedules a tuner keeps)",
              model={"loop_tokens": True, "pooling": "lse"}, train={"huber_delta": 0.1, "fast_weight": 4.0},
              trace_token=True),
        Lever("shipped-fast-x1", "shipped-fast-x4 at weight 2", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "fast_weight": 1.0}, trace_token=True),
        Lever("shipped-tuned-listmle-fast-x1", "shipped-tuned-listmle-0.03 with each task's fastest tenth of "
              "training programs weighted 2 times in the Huber loss (the shipped recipe)",
              model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0},
              trace_token=True, extra_data="tuned"),
        Lever("shipped-without-sweep", "shipped-tuned-listmle-fast-x1 without the operator sweep's workloads in "
              "training (the control of the sweep's data)", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0,
                     "sweep_workloads": "none"}, trace_token=True, extra_data="tuned"),
        Lever("shipped-sweep-untunable", "shipped-tuned-listmle-fast-x1 with only the operator sweep's untunable "
              "workloads (one program) in training: its tunable ones, random samples without a tuned schedule, "
              "left out", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0,
                     "sweep_workloads": "untunable"}, trace_token=True, extra_data="tuned"),
        Lever("shipped-sweep-weight-0.25", "shipped-tuned-listmle-fast-x1 with each training program of the "
              "operator sweep's own workloads weighted 0.25 in the Huber loss, every other program once (the sweep's "
              "standalone kernels pull the shared calibration less)", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0,
                     "sweep_weight": 0.25}, trace_token=True, extra_data="tuned"),
        Lever("shipped-workload-0.5", "shipped-tuned-listmle-fast-x1 with each training program weighted n^-0.5 in "
              "the Huber loss, n its task's training programs (between every program alike and every workload alike)",
              model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0,
                     "workload_weight": 0.5},
              trace_token=True, extra_data="tuned"),
        Lever("shipped-workload-1", "shipped-tuned-listmle-fast-x1 with each training program weighted 1/n in the "
              "Huber loss, n its task's training programs: an untunable task's one program counts as much as a "
              "tunable task's whole set", model={"loop_tokens": True, "pooling": "lse"},
              train={"huber_delta": 0.1, "task_group": 16, "listmle_weight": 0.03, "fast_weight": 1.0,
                     "workload_weight": 1.0},
              trace_token=True, extra_data="tuned"),
    )
}
"""The levers the study knows, by name.  ``epochs: -k`` means k times the base epochs."""
