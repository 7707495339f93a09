"""Training configuration: :class:`TrainData` (what to learn from), :class:`TrainConfig`
(optimisation) and the words model cards use for them.

Plain dataclasses and functions, no Lightning, so that a caller can build and check a
configuration without importing the trainer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.dataset import device_dirs
from cdmpp.device import cpu_has_bf16
from cdmpp.errors import InputError

SPLITS = ("network", "within-task", "cdmpp")


@dataclass
class TrainData:
    """What :func:`cdmpp.train.train.train` learns from, and how it is split.

    One device folder is trained with its own protocol (held-out network, validation
    workloads, optional pooling of other devices' programs); a dataset of several
    device folders, or several datasets, trains one model with a device table over all
    of them.

    Attributes:
        datasets: a device folder, a dataset folder of device folders, or several.
        holdout: the held-out network (zoo name), or ``None``.
        split: with several devices: ``"network"`` (strict: ``holdout`` out on every
            device), ``"within-task"`` (TenSet's protocol) or ``"cdmpp"`` (CDMPP's).
        exclude_devices: with several devices: device ids left out of training.
        pool: with one device folder: other devices' folders whose measured programs
            join training (labels as measured, no device feature).
        cmd_target: a device folder whose programs (features only) are the CMD term's
            target domain (needs ``TrainConfig.cmd_weight > 0``).
        benchmark_table: with one device folder: a markdown file of ``cdmpp bench
            table`` embedded in the model card.
        cache_dir: featurization cache (``None``: none).
        featurize_workers: processes that featurize a large device folder that is not
            cached yet (:func:`cdmpp.featurize.parallel.featurize_records`; the command
            line uses every core).

    Raises ``InputError`` on construction: no dataset, an unknown split, or a split
    other than the network split without several devices' worth of options.
    """

    datasets: list[Path]
    holdout: str | None = None
    split: str = "network"
    exclude_devices: tuple[str, ...] = ()
    pool: list[Path] = field(default_factory=list)
    cmd_target: Path | None = None
    benchmark_table: Path | None = None
    cache_dir: Path | None = None
    featurize_workers: int = 1

    def __post_init__(self):
        self.datasets = [Path(d) for d in ([self.datasets] if isinstance(self.datasets, (str, Path)) else self.datasets)]
        self.pool = [Path(p) for p in self.pool]
        self.exclude_devices = tuple(self.exclude_devices)
        if self.holdout == "none":
            self.holdout = None
        if not self.datasets:
            raise InputError("no dataset to train on")
        if self.split not in SPLITS:
            raise InputError(f"split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.split == "cdmpp" and self.holdout is None:
            raise InputError("the CDMPP protocol holds out a network: give a holdout")

    def several_devices(self) -> bool:
        """Whether training follows the corpus protocol (one model with a device table):
        several dataset folders, a dataset folder of several device folders, or a dataset
        folder of one device folder without ``pool`` or ``benchmark_table``.  A device
        folder named directly, or ``pool`` / ``benchmark_table``, trains a one-device model."""

        if len(self.datasets) > 1:
            return True
        dirs = device_dirs(self.datasets[0])
        if len(dirs) > 1:
            return True
        named_directly = dirs[0].resolve() == self.datasets[0].resolve()
        return not named_directly and not self.pool and self.benchmark_table is None

    def check(self, several: bool) -> None:
        """Raise ``InputError`` when an option does not fit the shape of the data."""
        if several and (self.pool or self.benchmark_table):
            raise InputError("pool and benchmark_table take one device folder as the dataset")
        if not several and (self.exclude_devices or self.split != "network"):
            raise InputError("exclude_devices and a split other than 'network' need a dataset with several "
                             "device folders")


@dataclass
class TrainConfig:
    """Optimisation settings.

    The defaults are the shipped checkpoint's recipe (with :class:`cdmpp.model.ModelConfig`'s).

    Attributes:
        epochs: passes over the training programs.
        batch_size: programs per batch.
        lr: peak AdamW learning rate (one-cycle schedule).
        weight_decay: AdamW weight decay.
        seed: seed of everything (weights, shuffling, validation draw).
        rank_weight: weight of the pairwise ranking term (RankNet's logistic loss over
            pairs of programs of the same task in a batch; Burges et al. 2005) added to
            the MSE.  0 trains on the MSE alone.
        rank_margin: pairs whose measured log-latencies differ by less than this
            (natural log; 0.05 is about 5%, the repeat noise) are not ranked.
        task_group: when > 0, training batches are made of groups of up to this many
            programs of one task (shuffled groups, shuffled within), so that a batch
            holds same-task pairs; 0 shuffles programs freely.
        cmd_weight: weight of the central-moment-discrepancy term
            (:func:`central_moment_discrepancy`) between the pooled embeddings of a
            training batch and of a batch of unlabelled target-domain programs (CDMPP,
            EuroSys 2024, section 5: CMD-based regularisation).  0 trains without it;
            it needs target programs (``fit_transformer(target=...)``).
        cmd_domain: which unlabelled programs the trainers (``cdmpp train``) give the
            CMD term when no CMD target device is named: ``"holdout"``, the held-out
            network's programs (the method), or ``"validation"``, the validation
            workloads' programs, so that the weight can be chosen on validation
            workloads under the same conditions the held-out network meets.
        cmd_moments: highest central moment the CMD term matches (``K``).
        device_dropout: for a model with device input, the probability that a
            training program's learned device embedding is replaced by the unknown
            device's (row 0; its descriptor stays), so that row 0 plus a descriptor
            learns to stand for a device never measured.
        within_weight: weight of the within-task term (:func:`within_task_loss`): the
            MSE between each program's predicted and measured deviation from its task's
            mean in the batch, which splits log-latency into a task-level part (the MSE
            carries it) and a within-task part that this term weighs again.  Needs
            same-task programs in a batch (``task_group > 0``).  0 trains without it.
        listmle_weight: weight of the within-task listwise term (:func:`~cdmpp.train.losses.listmle_loss`):
            ListMLE over each task's programs in a batch, ordered fastest first, each
            place weighted ``1 / log2(2 + place)`` so that the fast end weighs most
            (Xia et al., ICML 2008; Lan et al., AAAI 2014, position-aware ListMLE),
            beside the level loss.  Needs ``task_group > 0``.  0 trains without it.
        fast_weight: when > 0, the level loss (Huber or MSE) weighs each task's fastest
            tenth of training programs ``1 + fast_weight`` times, the others once
            (:func:`~cdmpp.train.fit.fast_end_weights`; a weighted mean over the batch):
            the level of the schedules a tuner keeps, at the cost of the slow end's.
            0 weighs every program alike.
        workload_weight: in [0, 1]; the level loss weighs each training program by
            ``n ** -workload_weight``, ``n`` the training programs of its task
            (:func:`~cdmpp.train.fit.workload_weights`): at 1 a task's whole set of
            programs counts as much as an untunable task's one program (every workload
            alike), at 0 every program alike (a task of 128 programs outweighs one of a
            single program 128 to 1).  Multiplies the ``fast_weight`` weights.
        huber_delta: when > 0, a Huber loss with this threshold (in standard deviations
            of the standardised log-latency) replaces the MSE: a robust loss for labels
            that a noisy timing threw far off.  0 keeps the MSE.
        max_repeat_cv: when > 0, training programs whose timing repeats vary by more
            than this (std / mean) are left out of training (validation and test
            untouched), as CDMPP (EuroSys 2024, section 6.1) drops programs whose
            repeats vary by more than 1%.  0 keeps every program.
        sweep_workloads: which of the operator sweep's workloads train (those that only
            the sweep has; a workload a zoo network shares always trains): ``"all"``;
            ``"untunable"``, only its tasks with one program (a design space of one
            program), its tunable tasks' few random samples left out; or ``"none"``
            (:func:`~cdmpp.train.splits.drop_sweep_workloads`).
        sweep_weight: > 0; the level loss weighs each training program of the operator
            sweep's own workloads this many times, every other program once (multiplies
            the ``fast_weight`` and ``workload_weight`` weights; needs the corpus protocol,
            which knows the sweep's workloads): below 1, the sweep's standalone kernels
            pull the shared calibration less than the zoo's programs.  1 weighs them alike.
        trace_dropout: for a model with trace tokens, the probability that a training
            program's trace token is masked out of its sequence (the program seen as its
            leaves alone), so that the checkpoint also predicts programs without a
            trace (a bare PrimFunc; :attr:`cdmpp.model.ModelConfig.trace_optional`).
            0 trains a model that always needs the trace.
        precision: Lightning's training precision: ``"32-true"``, ``"bf16-mixed"``, or
            ``"auto"`` (bf16 autocast where the CPU has AVX-512 BF16 or on a GPU with
            bf16, else 32-bit; :func:`resolve_precision`).
        train_share: share of each training task's programs that trains, drawn at
            random once per (device, task) with ``seed`` (at least one program per
            task; validation and test untouched): the data-scaling curve, programs
            per task against accuracy on one split.  1.0 trains on every program.
        length_pool: when > 0, training batches hold programs of similar token count:
            each epoch's shuffled programs are cut into pools of this many batches, each
            pool is sorted by token count and cut into batches, and the batches are
            shuffled (:class:`~cdmpp.train.samplers.LengthPoolBatchSampler`), so that a
            batch pads less; validation runs sorted by token count.  0 shuffles programs
            freely.  Not with ``task_group``.  On the fit study's Zen 4 split it halves
            the training time and raises validation MAPE from 36.7% to 40.9% (RESULTS.md,
            "The loop nest as input"), so the default is 0.
    """

    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-4
    seed: int = 0
    rank_weight: float = 0.0
    rank_margin: float = 0.05
    task_group: int = 0
    cmd_weight: float = 0.0
    cmd_domain: str = "holdout"
    cmd_moments: int = 5
    device_dropout: float = 0.1
    train_share: float = 1.0
    within_weight: float = 0.0
    listmle_weight: float = 0.0
    fast_weight: float = 0.0
    workload_weight: float = 0.0
    huber_delta: float = 0.1
    max_repeat_cv: float = 0.0
    sweep_workloads: str = "all"
    sweep_weight: float = 1.0
    trace_dropout: float = 0.2
    precision: str = "32-true"
    length_pool: int = 0

    def __post_init__(self):
        if self.rank_weight < 0 or self.rank_margin < 0 or self.task_group < 0 or self.cmd_weight < 0:
            raise InputError(
                f"rank_weight, rank_margin, task_group and cmd_weight must be >= 0, got "
                f"{self.rank_weight}, {self.rank_margin}, {self.task_group}, {self.cmd_weight}"
            )
        if not 0 <= self.device_dropout < 1:
            raise InputError(f"device_dropout must be in [0, 1), got {self.device_dropout}")
        if not 0 <= self.trace_dropout < 1:
            raise InputError(f"trace_dropout must be in [0, 1), got {self.trace_dropout}")
        if self.cmd_domain == "heldout":  # the name before "holdout", in older checkpoints' train_config
            self.cmd_domain = "holdout"
        if self.cmd_domain not in CMD_DOMAINS:
            raise InputError(f"cmd_domain must be 'holdout' or 'validation', got {self.cmd_domain!r}")
        if self.cmd_moments < 1:
            raise InputError(f"cmd_moments must be >= 1, got {self.cmd_moments}")
        if self.within_weight < 0 or self.huber_delta < 0 or self.max_repeat_cv < 0:
            raise InputError(
                f"within_weight, huber_delta and max_repeat_cv must be >= 0, got {self.within_weight}, "
                f"{self.huber_delta}, {self.max_repeat_cv}"
            )
        if self.within_weight > 0 and self.task_group == 0:
            raise InputError("within_weight > 0 needs task_group > 0: the within-task term needs same-task programs in a batch")
        if self.listmle_weight < 0 or (self.listmle_weight > 0 and self.task_group == 0):
            raise InputError(f"listmle_weight must be >= 0, and above 0 needs task_group > 0 (same-task programs in a "
                             f"batch), got {self.listmle_weight} with task_group {self.task_group}")
        if self.precision not in PRECISIONS:
            raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if not 0 < self.train_share <= 1:
            raise InputError(f"train_share must be in (0, 1], got {self.train_share}")
        if self.fast_weight < 0:
            raise InputError(f"fast_weight must be >= 0, got {self.fast_weight}")
        if not 0 <= self.workload_weight <= 1:
            raise InputError(f"workload_weight must be in [0, 1], got {self.workload_weight}")
        if self.sweep_workloads not in SWEEP_WORKLOADS:
            raise InputError(f"sweep_workloads must be one of {', '.join(SWEEP_WORKLOADS)}, got {self.sweep_workloads!r}")
        if not self.sweep_weight > 0:
            raise InputError(f"sweep_weight must be > 0, got {self.sweep_weight}")
        if self.length_pool < 0 or (self.length_pool > 0 and self.task_group > 0):
            raise InputError(f"length_pool must be >= 0 and takes no task_group, got length_pool {self.length_pool}, "
                             f"task_group {self.task_group}")


PRECISIONS = ("32-true", "bf16-mixed", "auto")
"""The training precisions :class:`TrainConfig` takes."""
SWEEP_WORKLOADS = ("all", "untunable", "none")
"""Which of the operator sweep's own workloads train (:attr:`TrainConfig.sweep_workloads`)."""


def resolve_precision(precision: str) -> str:
    """Lightning's precision for ``precision``: ``"auto"`` is ``"bf16-mixed"`` on a GPU with
    bf16 or on a CPU with AVX-512 BF16 (Zen 4, Zen 5, Sapphire and Emerald Rapids), else
    ``"32-true"``; the others are returned as they are."""
    if precision != "auto":
        return precision
    import torch  # noqa: PLC0415  (keeps this module free of torch)

    if torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "32-true"
    return "bf16-mixed" if cpu_has_bf16() else "32-true"


CMD_DOMAINS = {"holdout": "a held-out network", "validation": "validation workloads"}
"""What each ``TrainConfig.cmd_domain`` names, for error messages."""


def describe_loss(train_config: dict) -> str:
    """The loss of a checkpoint's ``train_config`` (as stored in its metadata), in words,
    for model cards: the base loss and each extra term with its weight."""
    c = train_config
    words = (f"Huber loss (threshold {c['huber_delta']} standard deviations) on standardised log-latency"
             if c.get("huber_delta") else "MSE on standardised log-latency")
    if c.get("within_weight"):
        words += f" plus {c['within_weight']} x a within-task term (deviation from the task's batch mean)"
    if c.get("rank_weight"):
        words += f" plus {c['rank_weight']} x a within-task pairwise ranking term (RankNet)"
    if c.get("listmle_weight"):
        words += (f" plus {c['listmle_weight']} x a within-task listwise ranking term (position-weighted ListMLE, "
                  f"Xia et al., ICML 2008) over groups of up to {c.get('task_group')} same-task programs in a batch")
    if c.get("fast_weight"):
        words += f", each task's fastest tenth of training programs weighted {1 + c['fast_weight']:g} times"
    if c.get("workload_weight"):
        words += (f", each training program weighted n^-{c['workload_weight']:g} (n: its task's training programs; "
                  f"every workload alike at 1)")
    if c.get("max_repeat_cv"):
        words += f"; training programs whose repeats vary by more than {c['max_repeat_cv']} (CV) left out"
    if c.get("sweep_workloads", "all") != "all":
        words += f"; of the operator sweep's own workloads, {c['sweep_workloads']} train"
    if c.get("sweep_weight", 1.0) != 1.0:
        words += f"; the operator sweep's own workloads' programs weighted {c['sweep_weight']:g} in the level loss"
    return words


def no_cmd_target(config: "TrainConfig") -> InputError:
    """The error for ``cmd_weight > 0`` with no programs to serve as the CMD term's target."""
    return InputError(f"cmd_weight > 0 needs {CMD_DOMAINS[config.cmd_domain]} or a CMD target device: their programs "
                      "are the CMD term's target domain")


@dataclass
class AdaptConfig:
    """How a new device's row is learned.

    Attributes:
        shots: programs measured on the new device (at most this many are chosen).
        selection: ``"kmeans"`` (CDMPP's sampling over the embeddings) or ``"random"``.
        init: where the new device's row starts: ``"nearest"`` (the row of the most
            similar known device, :func:`cdmpp.device_choice.nearest_device`) or
            ``"descriptor"`` (the unknown-device row with the new descriptor).
        method: ``"offset"`` (shift the device's log-latency by the shots' mean
            residual; the ranking stays the starting row's) or ``"row"`` (fit the
            row's numbers to the shots, then the offset).
        steps: full-batch Adam steps on the row.
        lr: Adam learning rate.
        l2: weight of the squared distance of the row from its start (keeps few
            shots from pulling it far).
        seed: seed of the choice.
    """

    shots: int = 64
    selection: str = "kmeans"
    init: str = "nearest"
    method: str = "offset"
    steps: int = 300
    lr: float = 0.05
    l2: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        if self.selection not in ("kmeans", "random"):
            raise InputError(f"selection must be 'kmeans' or 'random', got {self.selection!r}")
        if self.init not in ("nearest", "descriptor") or self.method not in ("offset", "row"):
            raise InputError(f"init must be 'nearest' or 'descriptor' and method 'offset' or 'row', got {self}")
        if self.shots < 1 or self.steps < 0 or self.lr <= 0 or self.l2 < 0:
            raise InputError(f"bad AdaptConfig: {self}")
