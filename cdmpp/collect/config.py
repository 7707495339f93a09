"""What to collect and how to time it: the dataclasses behind ``cdmpp collect``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.errors import CdmppError, InputError
from cdmpp.held_out import HELD_OUT_NETWORKS

SAMPLING_POLICY = (
    "per task, first replay-trace: uniform random decisions over MetaSchedule's post-order-apply design "
    "space (default schedule rules for the target); then evolutionary search (MetaSchedule's "
    "EvolutionarySearch, seeded from the task's measured programs) guided by an XGBoost "
    "cost model trained on the task's measurements so far, so that the fast programs a tuner asks about are "
    "represented. evolutionary_fraction of programs_per_task come from the second phase; each task's "
    "manifest entry gives random_programs, the count of its records (in file order) sampled at random "
    "before the evolutionary phase began. Duplicates by structural hash are skipped. Each task's seed "
    "derives from the base seed, its workload key and its count of programs measured before the visit."
)

TUNED_POLICY = (
    "the tuned phase: after a task of the largest tuned_tasks of each network by task weight x FLOPs has its "
    "round's programs, it gets tuned_programs more from MetaSchedule's evolutionary search with a tuner's "
    "settings (population tuned_population, TVM's other defaults) guided by a cost model that learns every "
    "trial: XGBoost (tuned_guide xgb, MetaSchedule's XGBModel, trained first on the task's measured programs) "
    "or a cdmpp checkpoint (tuned_guide cdmpp, its plugin, updated with them), keeping every trial, as a tuner "
    "would measure them. Each such task's manifest entry gives tuned_from, the count of its records (in file "
    "order) measured before its tuned phase began."
)


INPUT_FILL = (
    "TVM's random fill (values between 1 and 10) for every argument, except the integer index arguments "
    "of gathers (take), which get indices drawn uniformly from [0, extent of the dimension they index) "
    "with numpy default_rng(0) (cdmpp.collect.index_bounds)"
)


@dataclass
class MeasureConfig:
    """Timing protocol (the steadiest found on the 2-core VM, ``shared/notes/tvm-0.27.md``).

    Attributes:
        number: runs averaged into one repeat.
        repeat: repeats kept per program (all are stored in ``run_secs``).
        min_repeat_ms: minimum duration of one repeat in ms (0: no inflation).
        enable_cpu_cache_flush: flush the CPU caches before each repeat.
        build_timeout_s: per-program build timeout, in seconds of the build's CPU time
            (wall time with ``LocalBuilder``).  A build takes about 0.3 s of one core;
            the rare program that takes longer than this (LLVM's code generation of a
            huge unrolled body can take 60-110 s) is recorded as a failed build instead
            of holding a worker.
        run_timeout_s: per-program run timeout in seconds.
        build_workers: parallel build processes (``None``: all cores).
        max_repeat_cv: a program whose repeats' coefficient of variation exceeds this
            is timed once more, and the steadier measurement is kept (``None``: never).
        adaptive_repeats: adaptive repeats (local CPU and GPU runners): time this many
            repeats first, and stop there when their median is at least
            ``adaptive_min_s`` seconds and their spread (max - min) / median at most
            ``adaptive_max_spread``; otherwise time the other ``repeat -
            adaptive_repeats`` too.  Every timed repeat is kept in ``run_secs``, so a
            stopped program's record has ``adaptive_repeats`` of them.  ``None`` (or a
            value at or above ``repeat``): always ``repeat``.  The default rule changes
            the label (median of the kept repeats against the median of all 10) by a
            p90 of 0.5-0.9% and a p99 of 1.1-3.7% on the five CPU folders, replayed on
            their stored repeats (:func:`benchmarks.collect_rate.check_adaptive_repeats`,
            ``cdmpp bench repeat-check``).  Raises ``InputError`` when below 1.
        adaptive_min_s: seconds; faster programs always get every repeat.
        adaptive_max_spread: fraction; see ``adaptive_repeats``.
        warm: also time every program a second way, the ``"warm"`` protocol: the same
            runs and repeats without the cache flush, back to back after the evaluator's
            untimed warm-up run, so that the inputs and weights sit in the caches as they
            do when a kernel runs inside a network right after the kernel that wrote its
            inputs.  Those timings go to their own tuning-record file
            (:data:`cdmpp.dataset.WARM_RECORD_FILE`) beside the cold one, a JSONDatabase
            over the same workload file.
        warm_repeat: repeats of the warm protocol (every one kept, no adaptive pass).
            Without the flush the repeats spread little, and fewer of them keep the warm
            pass under a quarter of the collection's time.  Raises ``InputError`` when
            below 1.
        warm_min_repeat_ms: minimum duration of one warm repeat in ms (0: one run per
            repeat).  With 1, a kernel under 100 us gets at least 10 back-to-back runs per
            repeat (TVM's ``min_repeat_ms`` raises ``number`` until a repeat lasts that
            long), which steadies the label of a short kernel; back-to-back runs are what
            the warm protocol measures.  The cold protocol keeps one run per repeat, since
            the cache is flushed before a repeat only.  Raises ``InputError`` when negative.
    """

    number: int = 1
    repeat: int = 10
    min_repeat_ms: int = 0
    enable_cpu_cache_flush: bool = True
    build_timeout_s: float = 20.0
    run_timeout_s: float = 30.0
    build_workers: int | None = None
    max_repeat_cv: float | None = 0.2
    adaptive_repeats: int | None = 4
    adaptive_min_s: float = 0.002
    adaptive_max_spread: float = 0.02
    warm: bool = True
    warm_repeat: int = 3
    warm_min_repeat_ms: int = 0

    def __post_init__(self):
        if self.repeat < 1 or self.number < 1:
            raise InputError(f"repeat and number must be at least 1, got repeat={self.repeat}, number={self.number}")
        if self.warm_repeat < 1:
            raise InputError(f"warm_repeat must be at least 1, got {self.warm_repeat}")
        if self.warm_min_repeat_ms < 0 or self.min_repeat_ms < 0:
            raise InputError(f"min_repeat_ms and warm_min_repeat_ms must be at least 0, got "
                             f"{self.min_repeat_ms} and {self.warm_min_repeat_ms}")
        if self.adaptive_repeats is not None and self.adaptive_repeats < 1:
            raise InputError(f"adaptive_repeats must be at least 1, or None, got {self.adaptive_repeats}")
        if self.adaptive_repeats is not None and self.adaptive_repeats >= self.repeat:
            self.adaptive_repeats = None  # nothing left to skip: every repeat

    def evaluator_config(self, warm: bool = False):
        """MetaSchedule's ``EvaluatorConfig`` of this protocol (``warm``: without the cache flush,
        ``warm_repeat`` repeats of at least ``warm_min_repeat_ms``)."""
        from ..tvm_compat import EvaluatorConfig  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        return EvaluatorConfig(number=self.number, repeat=self.warm_repeat if warm else self.repeat,
                               min_repeat_ms=self.warm_min_repeat_ms if warm else self.min_repeat_ms,
                               enable_cpu_cache_flush=self.enable_cpu_cache_flush and not warm)


class MachineBusyError(CdmppError, RuntimeError):
    """The quiet-machine guard waited longer than allowed for other processes to go idle."""


@dataclass
class QuietConfig:
    """The quiet-machine guard: timings only while no other process is busy.

    Attributes:
        enabled: ``False`` (``--allow-busy``) times whatever else runs.
        max_other_cores: the most CPU, in cores, that all processes outside the collector
            (and its build and run workers) may use while a batch is timed.
        settle_s: the window over which the load is checked before a batch.
        max_wait_s: raise :class:`MachineBusyError` after waiting this long in one go
            (``None``: wait as long as it takes).
    """

    enabled: bool = True
    max_other_cores: float = 0.25
    settle_s: float = 1.0
    max_wait_s: float | None = None

    def __post_init__(self):
        if self.max_other_cores < 0 or self.settle_s <= 0:
            raise InputError(f"the quiet-machine guard needs max_other_cores >= 0 and settle_s > 0, "
                             f"got {self.max_other_cores} and {self.settle_s}")


@dataclass
class RPCSettings:
    """Measure through a TVM RPC tracker (``RPCRunner``) instead of on this host.

    Boards register with the tracker under ``device_key`` (``python -m tvm.exec.rpc_server
    --tracker HOST:PORT --key KEY``).  Programs are still built here, for this host's
    target, and records are tagged with this host's device id: use it for a pool of
    machines of the same kind as the collecting host.

    Attributes:
        tracker_host: tracker address, e.g. ``"127.0.0.1"``.
        tracker_port: tracker port (TVM's default is 9190).
        device_key: the key the boards registered with.
        session_timeout_s: seconds one remote timing session may take.
        parallel_sessions: boards timed at once (each board still times one program at a time).
    """

    tracker_host: str
    tracker_port: int
    device_key: str
    session_timeout_s: int = 60
    parallel_sessions: int = 1

    def __post_init__(self):
        if not self.tracker_host or not 0 < int(self.tracker_port) < 65536 or not self.device_key:
            raise InputError(f"an RPC tracker needs a host, a port in 1-65535 and a device key, got "
                             f"{self.tracker_host!r}:{self.tracker_port} with key {self.device_key!r}")
        if self.parallel_sessions < 1:
            raise InputError(f"parallel_sessions must be at least 1, got {self.parallel_sessions}")

    @classmethod
    def from_address(cls, address: str, device_key: str | None, **kw) -> RPCSettings:
        """Settings from ``"HOST:PORT"`` and a device key (``cdmpp collect --rpc-tracker --rpc-key``).

        Raises:
            InputError: the address is not ``HOST:PORT`` or the key is missing.
        """
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not device_key:
            raise InputError(f"an RPC tracker takes HOST:PORT and a device key, got {address!r} and {device_key!r}")
        return cls(host, int(port), device_key, **kw)


@dataclass
class CollectConfig:
    """What to collect.

    Raises ``InputError`` on construction when a setting cannot be used (no networks,
    counts below 1, rounds that do not increase, a share outside [0, 1], ``gpu`` with
    ``disable_avx512`` or ``rpc``).

    Attributes:
        networks: zoo names (see ``cdmpp networks``).
        out_dir: dataset folder; records go to ``out_dir/<device_id>/``.
        programs_per_task: measured programs wanted per distinct workload.
        batch_size: candidates sampled, built and timed per round.
        seed: base random seed (each task's seed is derived from it, its workload key and
            the count of its programs already measured, so that a later round samples new
            programs).
        disable_avx512: measure as the AVX-512-off device of this CPU.
        num_cores: cores for generated code (``None``: all).
        max_tasks_per_network: cap on tasks per network (``None``: all), for tests.
        evolutionary_fraction: share of each task's programs sampled by MetaSchedule's
            evolutionary search (the rest are uniform random samples, taken first).
            Above 0, that search also tops up a random phase that fell short (failed
            builds, a small design space); at 0 nothing but random samples is measured.
        evolutionary_population: population of that search; each round costs about
            ``4 * population`` schedule mutations and cost-model predictions.  32 takes a
            quarter of the search time of 128 and draws programs as fast (``cdmpp
            search-check`` in the datasets README).
        measure: the timing protocol.
        rpc: measure through an RPC tracker (``None``: on this host, with ``LocalRunner``).
        gpu: measure on this host's NVIDIA GPU (CUDA target, device id ``gpu-<name>-sm<XY>``)
            instead of its CPU; the CPU cache flush is then switched off.
        retry_failed: time again the programs that failed in an earlier collection (after
            fixing what made them fail); their old lines stay in ``failures.jsonl``.
        rounds: grow every task in one run, round after round, to each of these counts
            (e.g. ``(32, 64, 128)``); empty: one round to ``programs_per_task``.
        retry_exhausted: visit tasks whose design space an earlier visit found used up
            (marked ``space_exhausted_at`` in the manifest; skipped by default, except
            with ``retry_failed``).
        quiet: the quiet-machine guard around every timing batch.
        tasks_in_flight: tasks visited at once (1 or 2): with 2, one task's batch builds
            while the other samples its next batch; with 1, every batch is sampled,
            built and timed in turn.
        tuned_tasks: the fast-end policy (:data:`TUNED_POLICY`): this many tasks of each
            network, the largest by task weight x FLOPs, get ``tuned_programs`` more
            programs from a tuner's search after the last round's (0: none).
        tuned_programs: programs per tuned task, beyond the last round's count.
        tuned_guide: ``"xgb"`` (MetaSchedule's XGBModel) or ``"cdmpp"`` (the plugin with
            ``tuned_checkpoint``) guides the tuned phase.
        tuned_checkpoint: the plugin's checkpoint (``None``: the shipped one).
        tuned_population: population of the tuned phase's search (TVM's default 512).
        tuned_skip_networks: networks whose workloads never get a tuned phase, such as a
            held-out test network whose workloads other networks share (their tasks must
            be in the folder's manifest or the network among ``networks``).
        tuned_only: visit only the tuned phase's tasks (each gets its rounds' programs,
            then the tuned phase), leaving the networks' other tasks listed but unmeasured:
            fast-end data on a device folder without a corpus yet.
        new_workloads_only: visit only the tasks whose workload no other device folder of
            ``out_dir`` has measured (by structural hash; this folder's own programs do not
            count): on a second machine, the quickest way to widen the corpus's distinct
            workloads.  The skipped tasks stay listed in the manifest.
        held_out: networks outside the zoo whose workloads are never measured, even where a
            zoo network shares them (by structural hash): the held-out test networks.
        network_notes: how some networks were chosen (network -> words), kept in the
            manifest as the network's ``chosen_by`` (the sweep's second pass,
            :func:`cdmpp.networks.sweep.refine_names`).
        pack_every_s: when set, rewrite the gzipped copies of the device folder's files
            (``cdmpp pack``) and the manifest's counts between tasks at most this often
            (seconds), and once more at the end with the dataset card (``README.md``,
            :func:`cdmpp.card.card`), so that a shipped, version-controlled
            dataset holds every finished record even when the session running the
            collection is cut off (the plain files it appends to are not committed).
            ``None``: never (run ``cdmpp pack`` yourself).
    """

    networks: list[str]
    out_dir: Path
    programs_per_task: int = 64
    batch_size: int = 32
    seed: int = 0
    disable_avx512: bool = False
    num_cores: int | None = None
    max_tasks_per_network: int | None = None
    evolutionary_fraction: float = 0.5
    evolutionary_population: int = 32
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    rpc: RPCSettings | None = None
    gpu: bool = False
    pack_every_s: float | None = None
    retry_failed: bool = False
    rounds: tuple[int, ...] = ()
    retry_exhausted: bool = False
    quiet: QuietConfig = field(default_factory=QuietConfig)
    tasks_in_flight: int = 2
    tuned_tasks: int = 0
    tuned_programs: int = 256
    tuned_guide: str = "xgb"
    tuned_checkpoint: Path | None = None
    tuned_population: int = 512
    tuned_skip_networks: tuple[str, ...] = ()
    tuned_only: bool = False
    new_workloads_only: bool = False
    held_out: tuple[str, ...] = HELD_OUT_NETWORKS
    network_notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        self.out_dir = Path(self.out_dir)
        self.held_out = tuple(self.held_out)
        self.rounds = tuple(int(r) for r in self.rounds)
        self.tuned_skip_networks = tuple(self.tuned_skip_networks)
        if not self.networks:
            raise InputError("no networks to collect (see `cdmpp networks`)")
        if self.programs_per_task < 1 or self.batch_size < 1:
            raise InputError(f"programs_per_task and batch_size must be at least 1, got "
                             f"{self.programs_per_task} and {self.batch_size}")
        if any(r < 1 for r in self.rounds) or list(self.rounds) != sorted(set(self.rounds)):
            raise InputError(f"rounds must be positive and increasing, like 32,64,128, got {self.rounds}")
        if not 0.0 <= self.evolutionary_fraction <= 1.0:
            raise InputError(f"evolutionary_fraction is a share in [0, 1], got {self.evolutionary_fraction}")
        if self.tasks_in_flight not in (1, 2):
            raise InputError(f"tasks_in_flight is 1 or 2, got {self.tasks_in_flight}")
        if self.gpu and self.disable_avx512:
            raise InputError("disable_avx512 is a CPU device; it does not go with gpu")
        if self.gpu and self.rpc is not None:
            raise InputError("gpu measures on this host; it does not go with an RPC tracker")
        if self.tuned_tasks < 0 or self.tuned_programs < 1 or self.tuned_population < 1:
            raise InputError(f"tuned_tasks must be >= 0, tuned_programs and tuned_population >= 1, got "
                             f"{self.tuned_tasks}, {self.tuned_programs}, {self.tuned_population}")
        if self.tuned_only and not self.tuned_tasks:
            raise InputError("tuned_only visits the tuned phase's tasks alone; give tuned_tasks >= 1 with it")
        if self.tuned_guide not in ("xgb", "cdmpp"):
            raise InputError(f"tuned_guide is 'xgb' or 'cdmpp', got {self.tuned_guide!r}")

    @property
    def goals(self) -> tuple[int, ...]:
        """Programs per task wanted after each round: ``rounds``, or ``(programs_per_task,)``."""
        return tuple(self.rounds) or (self.programs_per_task,)

    def tuned_json(self) -> dict | None:
        """The tuned phase's settings for the manifest (``None`` without one)."""
        if not self.tuned_tasks:
            return None
        return {"tasks_per_network": self.tuned_tasks, "programs": self.tuned_programs, "guide": self.tuned_guide,
                "checkpoint": str(self.tuned_checkpoint) if self.tuned_checkpoint else None,
                "population": self.tuned_population,
                **({"skip_networks": list(self.tuned_skip_networks)} if self.tuned_skip_networks else {}),
                **({"only": True} if self.tuned_only else {})}


@dataclass
class CollectSummary:
    """What a ``collect`` call did: counts of new successes and failures, and the device."""

    device_id: str
    device_dir: Path
    measured: int
    failed: int
    skipped_duplicates: int
    seconds: float
    stopped: bool = False
    task_errors: int = 0  # tasks skipped after an error of TVM's (each in the manifest's ``task_errors``)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # wall seconds per stage (``STAGES``)
