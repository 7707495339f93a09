"""``cdmpp collect``: sample schedules of real networks' tasks and measure them.

Pipeline per network (TenSet, NeurIPS 2021, section 3, on MetaSchedule instead of
Ansor): the network, defined in code, is lowered through Relax and its MetaSchedule
tuning tasks are extracted with their task weights.  For each task, schedules are
sampled from its design space (``ReplayTrace``: random decisions over the
post-order-apply design space), built on all cores, then timed one at a time on the
local CPU.  Two tasks are in flight at a time: one task's batch builds while the other
samples, and the build workers are paused while anything is timed.  Every success is
committed at once to the device's JSONDatabase; every failed build or run goes to
``failures.jsonl`` with its error.

Resuming: the database files are append-only and a program's structural hash is its
identity, so a restarted collection skips the programs already measured (or failed,
unless ``retry_failed``) and continues until each task has ``programs_per_task``
measurements.

Inputs: the runner fills every argument with TVM's random fill, except the integer
index arguments of gathers (``take``), which get in-range indices (:func:`index_bounds`).

Quiet machine: every timing batch waits until no process outside the collector uses
the CPU, and is timed again when one did meanwhile (:class:`QuietGuard`).  The wall
time of each stage is recorded in the manifest (:class:`StageClock`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import itertools
import json
import os
import shutil
import statistics
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cdmpp.errors import CdmppError, InputError
from . import dataset as ds
from .device import DeviceDescriptor, DeviceUnavailableError, local_cpu, local_gpu

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
            their stored repeats (:func:`cdmpp.bench.collect_rate.check_adaptive_repeats`,
            ``cdmpp bench repeat-check``).  Raises ``InputError`` when below 1.
        adaptive_min_s: seconds; faster programs always get every repeat.
        adaptive_max_spread: fraction; see ``adaptive_repeats``.
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

    def __post_init__(self):
        if self.adaptive_repeats is not None and self.adaptive_repeats < 1:
            raise InputError(f"adaptive_repeats must be at least 1, or None, got {self.adaptive_repeats}")
        if self.adaptive_repeats is not None and self.adaptive_repeats >= self.repeat:
            self.adaptive_repeats = None  # nothing left to skip: every repeat

    def run_evaluator(self):
        """The runner's ``f_run_evaluator`` of this protocol (``None``: MetaSchedule's default)."""
        if self.adaptive_repeats is None:
            return None
        import functools  # pylint: disable=import-outside-toplevel

        return functools.partial(adaptive_run_evaluator, first=self.adaptive_repeats, min_s=self.adaptive_min_s,
                                 max_spread=self.adaptive_max_spread)

    def evaluator_config(self):
        """MetaSchedule's ``EvaluatorConfig`` of this protocol."""
        from .tvm_compat import EvaluatorConfig  # pylint: disable=import-outside-toplevel

        return EvaluatorConfig(number=self.number, repeat=self.repeat, min_repeat_ms=self.min_repeat_ms,
                               enable_cpu_cache_flush=self.enable_cpu_cache_flush)


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


@dataclass
class CollectConfig:
    """What to collect.

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
        pack_every_s: when set, rewrite the gzipped copies of the device folder's files
            (``cdmpp pack``) and the manifest's counts between tasks at most this often
            (seconds), and once more at the end, so that a shipped, version-controlled
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

    @property
    def goals(self) -> tuple[int, ...]:
        """Programs per task wanted after each round: ``rounds``, or ``(programs_per_task,)``."""
        return tuple(self.rounds) or (self.programs_per_task,)


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


@dataclass
class _Task:
    network: str
    task_name: str
    weight: int
    flops: float
    mod: object
    workload_key: str = ""


def extract_network_tasks(network: str, target) -> list[_Task]:
    """The MetaSchedule tuning tasks of a zoo network, with weights and FLOPs."""
    from . import networks as zoo  # pylint: disable=import-outside-toplevel
    from .tvm_compat import estimate_tir_flops, extract_tasks, relax_module_from_torch

    spec = zoo.get_network(network)
    mod = relax_module_from_torch(spec.build(), spec.example_inputs(), target)
    tasks = []
    for t in extract_tasks(mod, target):
        sub = t.dispatched[0]
        try:
            flops = float(estimate_tir_flops(sub))
        except Exception:  # noqa: BLE001  estimate fails on some opaque blocks
            flops = 0.0
        tasks.append(_Task(network, str(t.task_name), int(t.weight), flops, sub))
    return tasks


def _known_tasks(manifest: dict, device_dir: Path) -> dict[str, list[_Task]]:
    """Task lists of networks already extracted into this device folder (no Relax import needed).

    A network counts only when the manifest lists all of its tasks and each task's workload
    is in the workload file; anything else is extracted again.
    """
    counts = {n: v.get("tasks", 0) for n, v in manifest.get("networks", {}).items()}
    if not counts or ds.resolve(device_dir / ds.WORKLOAD_FILE) is None:
        return {}
    from .tvm_compat import Workload  # pylint: disable=import-outside-toplevel

    mods = {}
    for _, obj in ds.iter_json_lines(ds.resolve(device_dir / ds.WORKLOAD_FILE)):
        mods[str(obj[0])] = obj
    out: dict[str, list[_Task]] = {}
    for t in manifest.get("tasks", []):
        if t["network"] in counts and t.get("workload_key") in mods:
            out.setdefault(t["network"], []).append(t)
    tasks = {}
    for n, entries in out.items():
        if len(entries) == counts[n]:
            tasks[n] = [
                _Task(n, e["task_name"], e["weight"], e["flops"], Workload.from_json(mods[e["workload_key"]]).mod)
                for e in entries
            ]
    return tasks


def _program_key(mod) -> str:
    from .tvm_compat import structural_hash  # pylint: disable=import-outside-toplevel

    return str(structural_hash(mod))


def _task_seed(seed: int, workload_key: str, measured: int = 0) -> int:
    """The sampling seed of a task: from the base seed, its workload key and its programs measured so far.

    A first visit (``measured == 0``) keeps the seed it always had. A later round (a
    larger ``programs_per_task``, or a resumed task) gets another seed, so that its
    sampler draws new programs instead of replaying the ones already measured; a replay
    fills whole rounds with duplicates, which reads as a used-up design space.
    """
    return (seed * 1_000_003 + int(workload_key) % 2_147_483_629 + 7_919 * measured) % 2_147_483_647


class _Store:
    """Append-only files of one device folder, and what they already hold."""

    def __init__(self, device_dir: Path):
        from .tvm_compat import JSONDatabase  # pylint: disable=import-outside-toplevel

        self.dir = device_dir
        device_dir.mkdir(parents=True, exist_ok=True)
        for name in (ds.WORKLOAD_FILE, ds.RECORD_FILE, ds.FAILURE_FILE):
            ds.unpack(device_dir / name)  # continue a shipped dataset
            ds.repair_jsonl(device_dir / name)
        self.db = JSONDatabase(
            str(device_dir / ds.WORKLOAD_FILE), str(device_dir / ds.RECORD_FILE), allow_missing=True
        )
        keys = [str(obj[0]) for _, obj in ds.iter_json_lines(device_dir / ds.WORKLOAD_FILE)]
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        for _, obj in ds.iter_json_lines(device_dir / ds.RECORD_FILE):
            k = keys[int(obj[0])]
            self.done[k] = self.done.get(k, 0) + 1
        self.failed_keys: dict[str, set[str]] = {}
        self._program_keys: dict[str, set[str]] = {}  # measured_program_keys by workload key
        if (device_dir / ds.FAILURE_FILE).exists():
            for _, obj in ds.iter_json_lines(device_dir / ds.FAILURE_FILE):
                self.failed[obj["workload_key"]] = self.failed.get(obj["workload_key"], 0) + 1
                self.failed_keys.setdefault(obj["workload_key"], set()).add(obj["program_key"])

    def workload(self, mod):
        wl = self.db.commit_workload(mod)
        return wl, str(wl.as_json()[0])

    def measured_program_keys(self, workload, workload_key: str | None = None) -> set[str]:
        """Structural hashes of this workload's measured programs (rebuilt from their traces).

        With ``workload_key``, the first call replays the traces and later calls return
        that set kept up to date by :meth:`add_record` (a task visited in every round of a
        long run no longer replays all its measured programs at each visit).  Returns a
        new set the caller may change."""
        from .tvm_compat import Schedule  # pylint: disable=import-outside-toplevel

        if workload_key is not None and workload_key in self._program_keys:
            return set(self._program_keys[workload_key])
        keys = set()
        for rec in self.db.get_top_k(workload, 1 << 30):
            sch = Schedule(workload.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            keys.add(_program_key(sch.mod))
        if workload_key is not None:
            self._program_keys[workload_key] = set(keys)
        return keys

    def add_record(self, record, workload_key: str, program_key: str | None = None) -> None:
        """Commit a measured tuning record (flushed at once by the JSONDatabase); ``program_key``
        (its structural hash) joins the workload's kept :meth:`measured_program_keys`."""
        self.db.commit_tuning_record(record)
        self.done[workload_key] = self.done.get(workload_key, 0) + 1
        if workload_key in self._program_keys:
            if program_key is None:  # unknown: replay the traces again at the next call
                del self._program_keys[workload_key]
            else:
                self._program_keys[workload_key].add(program_key)

    def add_failure(self, task: _Task, program_key: str, stage: str, error: str, record) -> None:
        """Append a failed build/run: the tuning record (``run_secs`` null) with its error."""
        line = {
            "workload_key": task.workload_key,
            "network": task.network,
            "task_name": task.task_name,
            "program_key": program_key,
            "stage": stage,
            "error": error[:4000],
            "record": record.as_json(),
            "time": time.time(),
        }
        with open(self.dir / ds.FAILURE_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.failed[task.workload_key] = self.failed.get(task.workload_key, 0) + 1
        self.failed_keys.setdefault(task.workload_key, set()).add(program_key)


_INDEX_DTYPES = ("int32", "int64")
_CHILDREN = (
    "body", "block", "init", "seq", "then_case", "else_case", "value", "indices", "condition",
    "a", "b", "true_value", "false_value", "args", "base", "stride",
)


def index_bounds(mod) -> tuple[tuple[int, int], ...]:
    """Where a program gathers by index, the range its integer inputs must keep to.

    For each ``int32``/``int64`` tensor argument of the module's PrimFunc ``main`` (or
    its only PrimFunc): ``(position, bound)``, where ``bound`` is the smallest extent of
    a buffer dimension indexed directly by a load of that argument (``table[ids[i], j]``
    gives ``table``'s first extent), or 1 when no such use is found (the argument is then
    filled with zeros).  The runner fills these arguments with indices from
    ``[0, bound)`` (:func:`cdmpp.tvm_compat.alloc_arguments_in_bounds`); TVM's default
    fill would put out-of-range indices there, and the gather would crash the runner.

    Args:
        mod: an IRModule (scheduled or not) or a PrimFunc.

    Returns:
        ``(position, bound)`` pairs in argument order; empty for a program without
        integer tensor arguments.
    """
    from .tvm_compat import PrimFunc  # pylint: disable=import-outside-toplevel

    if isinstance(mod, PrimFunc):
        func = mod
    else:
        funcs = [f for _, f in mod.functions.items() if isinstance(f, PrimFunc)]
        func = mod["main"] if len(funcs) != 1 else funcs[0]
    ints = []
    buffer_map = getattr(func, "buffer_map", None)  # TVM 0.27's tirx: the parameters are the buffers
    for pos, param in enumerate(func.params):
        buf = buffer_map.get(param) if buffer_map is not None else param
        if buf is not None and hasattr(buf, "shape") and str(buf.dtype) in _INDEX_DTYPES:
            ints.append((pos, buf))
    if not ints:
        return ()
    nodes, stack = [], [func.body]
    while stack:  # every statement and expression of the body
        node = stack.pop()
        if node is None or isinstance(node, (int, float, str, bool)):
            continue
        if type(node).__name__ == "Array":
            stack.extend(node)
            continue
        nodes.append(node)
        for attr in _CHILDREN:
            try:
                child = getattr(node, attr)
            except AttributeError:
                continue
            if child is not None and not isinstance(child, (int, float, str, bool)):
                stack.append(child)

    def buffer_of(node):
        return node.buffer if hasattr(node, "buffer") else node.source

    def index_source(e):
        while type(e).__name__ == "Cast":
            e = e.value
        if type(e).__name__ not in ("BufferLoad", "TensorLoad"):
            return None
        buf = buffer_of(e)
        return next((pos for pos, b in ints if b.same_as(buf)), None)

    stores = [n for n in nodes if type(n).__name__ == "BufferStore"]
    grew = True
    while grew:  # a schedule may copy the indices into a cache buffer first (cache_read)
        grew = False
        for st in stores:
            pos = index_source(st.value)
            if pos is not None and not any(b.same_as(st.buffer) for _, b in ints):
                ints.append((pos, st.buffer))
                grew = True
    bounds: dict[int, int | None] = {pos: None for pos, _ in ints}
    for node in nodes:
        if type(node).__name__ not in ("BufferLoad", "TensorLoad", "BufferStore"):
            continue
        shape = buffer_of(node).shape
        for dim, idx in enumerate(node.indices):
            pos = index_source(idx)
            extent = shape[dim] if dim < len(shape) else None
            if pos is not None and type(extent).__name__ == "IntImm":
                old = bounds[pos]
                bounds[pos] = int(extent.value) if old is None else min(old, int(extent.value))
    return tuple((pos, max(1, b or 1)) for pos, b in sorted(bounds.items()))


STAGES = (
    "task extraction",
    "random sampling",
    "evolutionary search",
    "cost model training",
    "cost model features",
    "de-duplication",
    "building",
    "argument allocation",
    "cache flush",
    "runner start-up",
    "timing",
    "writing",
    "quiet-machine wait",
)
"""The collector's stages, in pipeline order (:class:`StageClock`).

``cost model features`` is the evolutionary phase's XGBoost model's feature extraction
(TVM's ``PerStoreFeature``, when it trains and when it scores the search's candidates);
``evolutionary search`` and ``cost model training`` are the rest of those stages.
``timing`` is the kernels' own run time (``number * repeat`` runs of each program);
``cache flush`` is the rest of the time evaluator's wall time (the flush of the inputs
before each repeat, and the evaluator's own overhead); ``runner start-up`` is the rest
of the runner's wall time (process hand-off, loading the built module).
"""


class StageClock:
    """Wall seconds spent in each collection stage (:data:`STAGES`); a stage entered inside
    another counts for itself only (the outer stage gets the rest)."""

    def __init__(self):
        self.seconds: dict[str, float] = dict.fromkeys(STAGES, 0.0)
        self._nested: list[float] = []  # per open stage: seconds of the stages inside it

    @contextmanager
    def stage(self, name: str):
        """Add the wall time of the ``with`` body, less that of stages nested in it, to ``name``."""
        t0 = time.perf_counter()
        self._nested.append(0.0)
        try:
            yield
        finally:
            took = time.perf_counter() - t0
            self.seconds[name] += took - self._nested.pop()
            if self._nested:
                self._nested[-1] += took

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] += max(0.0, seconds)

    def to_json(self) -> dict[str, float]:
        return {k: round(v, 6) for k, v in self.seconds.items()}

    def table(self, programs: int) -> str:
        """A plain-text table: seconds, share of the total and ms per measured program of each stage."""
        total = sum(self.seconds.values()) or 1.0
        lines = [f"{'stage':<22}{'s':>9}{'share':>8}{'ms/prog':>9}"]
        for k, v in self.seconds.items():
            lines.append(f"{k:<22}{v:>9.1f}{100 * v / total:>7.1f}%{1e3 * v / max(programs, 1):>9.1f}")
        lines.append(f"{'total':<22}{total:>9.1f}{100.0:>7.1f}%{1e3 * total / max(programs, 1):>9.1f}")
        return "\n".join(lines)


class QuietGuard:
    """Checks the CPU use of every process outside this one and its descendants.

    Before a timing batch it waits until that load stays under the threshold over a
    window; after the batch it measures the load over the batch, and the collector
    times a disturbed batch again.  Load = the CPU seconds (user + system, ``psutil``)
    that other processes used between two snapshots, per wall second, in cores; a
    process started between the snapshots counts with all its CPU time.  The collector's
    own build and run workers are its descendants and do not count.
    """

    def __init__(self, cfg: QuietConfig):
        import psutil  # pylint: disable=import-outside-toplevel

        self.cfg = cfg
        self._psutil = psutil
        self._me = psutil.Process()
        self.waited_s = 0.0
        self.retimed = 0
        self.batches: list[tuple[float, float, bool]] = []  # (unix time at the start, load in cores, kept)
        self.last: tuple[float, dict[int, float]] | None = None  # the end of the last timed batch

    def snapshot(self) -> tuple[float, dict[int, float]]:
        """``(wall s, {pid: CPU s})`` of every process outside this process tree."""
        mine = {self._me.pid}
        try:
            mine.update(c.pid for c in self._me.children(recursive=True))
        except self._psutil.Error:
            pass
        cpu = {}
        for p in self._psutil.process_iter(["cpu_times"]):
            t = p.info.get("cpu_times")
            if p.pid not in mine and t is not None:
                cpu[p.pid] = t.user + t.system
        return time.perf_counter(), cpu

    @staticmethod
    def cores_between(start: tuple[float, dict[int, float]], end: tuple[float, dict[int, float]]) -> float:
        """Cores used by other processes between two snapshots."""
        wall = max(end[0] - start[0], 1e-3)
        return sum(max(0.0, s - start[1].get(pid, 0.0)) for pid, s in end[1].items()) / wall

    def other_cores(self, since: tuple[float, dict[int, float]]) -> float:
        """Cores used by other processes since the snapshot ``since``."""
        return self.cores_between(since, self.snapshot())

    def wait_quiet(self, report: Callable[[str], None] | None = None) -> float:
        """Block until other processes used at most ``max_other_cores`` over ``settle_s``.

        Returns:
            The load of the last window, in cores.

        Raises:
            MachineBusyError: still busy after ``max_wait_s``.
        """
        if not self.cfg.enabled:
            return 0.0
        start = time.perf_counter()
        while True:
            snap = self.snapshot()
            time.sleep(self.cfg.settle_s)
            load = self.other_cores(snap)
            if load <= self.cfg.max_other_cores:
                break
            waited = time.perf_counter() - start
            if self.cfg.max_wait_s is not None and waited > self.cfg.max_wait_s:
                raise MachineBusyError(
                    f"other processes used {load:.2f} cores (limit {self.cfg.max_other_cores}) for {waited:.0f} s; "
                    "stop them, or pass --allow-busy to time anyway"
                )
            if report is not None:
                report(f"waiting for a quiet machine: other processes use {load:.2f} cores")
        self.waited_s += time.perf_counter() - start - self.cfg.settle_s
        return load

    def run_quietly(self, fn: Callable[[], object], report: Callable[[str], None] | None = None, wait_stage=None):
        """``fn()`` (a timing batch) on a quiet machine: wait for quiet, run, and run again
        when other processes were busy during it.

        The machine counts as quiet before a batch when other processes stayed under the
        threshold since the last batch ended (no extra wait); otherwise this waits for a
        quiet window.  Every run's start, load and outcome go to ``batches``.

        Args:
            fn: the batch; its return value is returned.
            report: called with a line when waiting or running again.
            wait_stage: a context manager factory timing the waits (``None``: not timed).

        Raises:
            MachineBusyError: as :meth:`wait_quiet`.
        """
        if not self.cfg.enabled:
            return fn()
        while True:
            with wait_stage() if wait_stage is not None else contextlib.nullcontext():
                if self.last is None or self.other_cores(self.last) > self.cfg.max_other_cores:
                    self.wait_quiet(report)
            start, started_at = self.snapshot(), time.time()
            out = fn()
            self.last = self.snapshot()
            load = self.cores_between(start, self.last)
            quiet = load <= self.cfg.max_other_cores
            self.batches.append((started_at, load, quiet))
            if quiet:
                return out
            self.retimed += 1
            if report is not None:
                report(f"a batch was timed while other processes used {load:.2f} cores: timing it again")

    def to_json(self) -> dict:
        return {
            "enabled": self.cfg.enabled,
            "max_other_cores": self.cfg.max_other_cores,
            "waited_s": round(self.waited_s, 1),
            "retimed_batches": self.retimed,
            "batches": "[unix time at the start, CPU of other processes in cores, kept (1) or timed again (0)] per timing",
            "timings": [[round(t, 1), round(load, 3), int(kept)] for t, load, kept in self.batches],
        }


def _runner_probe(stage_file: str, stage: str, seconds: float) -> None:
    """In a runner worker: append one stage time to the collector's probe file."""
    with open(stage_file, "a", encoding="utf-8") as f:
        f.write(f"{stage}\t{seconds:.6f}\n")


def _probed_alloc(device, args_info, alloc_repeat, inner=None, stage_file: str = ""):
    """``f_alloc_argument`` that times the allocation (in the runner worker)."""
    if inner is None:
        from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument as inner  # pylint: disable=import-outside-toplevel
    t0 = time.perf_counter()
    out = inner(device, args_info, alloc_repeat)
    _runner_probe(stage_file, "argument allocation", time.perf_counter() - t0)
    return out


def stops_early(first_costs: list[float], min_s: float, max_spread: float) -> bool:
    """The adaptive-repeat rule (``MeasureConfig.adaptive_repeats``): whether a program's
    first repeats (seconds) are enough, i.e. their median is at least ``min_s`` seconds and
    their spread (max - min) / median at most ``max_spread``."""
    median = statistics.median(first_costs)
    return median >= min_s and max(first_costs) - min(first_costs) <= max_spread * median


def adaptive_run_evaluator(rt_mod, device, evaluator_config, repeated_args, first: int = 4, min_s: float = 0.002,
                           max_spread: float = 0.02) -> list[float]:
    """A MetaSchedule ``f_run_evaluator`` with adaptive repeats (``MeasureConfig.adaptive_repeats``).

    Times ``first`` repeats with MetaSchedule's own evaluator; when their median is at
    least ``min_s`` seconds and their spread (max - min) / median at most
    ``max_spread``, returns them, otherwise times ``evaluator_config.repeat - first``
    more (the time evaluator's untimed warm-up run comes again) and returns all of them,
    in the order they were timed.

    Returns:
        Seconds per repeat: ``first`` or ``evaluator_config.repeat`` floats per argument set.
    """
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common  # pylint: disable=import-outside-toplevel

    if not 0 < first < evaluator_config.repeat:
        return run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)
    costs = run_evaluator_common(rt_mod, device, evaluator_config._replace(repeat=first), repeated_args)
    if stops_early(costs, min_s, max_spread):
        return costs
    return costs + run_evaluator_common(rt_mod, device, evaluator_config._replace(repeat=evaluator_config.repeat - first),
                                        repeated_args)


def _probed_evaluator(rt_mod, device, evaluator_config, repeated_args, stage_file: str = "", inner=None):
    """``f_run_evaluator`` that splits the evaluator's wall time into kernel time and the rest
    (``inner``: the evaluator it wraps; ``None``: MetaSchedule's default)."""
    from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common  # pylint: disable=import-outside-toplevel

    t0 = time.perf_counter()
    costs = (inner or run_evaluator_common)(rt_mod, device, evaluator_config, repeated_args)
    wall = time.perf_counter() - t0
    kernel = sum(costs) * evaluator_config.number
    _runner_probe(stage_file, "timing", kernel)
    _runner_probe(stage_file, "cache flush", wall - kernel)
    return costs


@contextmanager
def _runner_functions(runner, bounds: tuple, stage_file: str | None):
    """Set the runner's argument allocator (in-range indices for gathers, :func:`index_bounds`)
    and, on a :class:`LocalRunner`, the stage probes; restore them afterwards."""
    import functools  # pylint: disable=import-outside-toplevel

    from .tvm_compat import RPCRunner, alloc_arguments_in_bounds, rpc_alloc_arguments_in_bounds  # pylint: disable=import-outside-toplevel

    old = runner.f_alloc_argument, runner.f_run_evaluator
    alloc = None
    if bounds:
        fill = rpc_alloc_arguments_in_bounds if isinstance(runner, RPCRunner) else alloc_arguments_in_bounds
        alloc = functools.partial(fill, index_bounds=bounds)
    try:
        if stage_file is not None and not isinstance(runner, RPCRunner):
            runner.f_alloc_argument = functools.partial(_probed_alloc, inner=alloc, stage_file=stage_file)
            runner.f_run_evaluator = functools.partial(_probed_evaluator, stage_file=stage_file,
                                                       inner=old[1] if callable(old[1]) else None)
        elif alloc is not None:
            runner.f_alloc_argument = alloc
        yield runner
    finally:
        runner.f_alloc_argument, runner.f_run_evaluator = old


@contextmanager
def _build_tmpdir(path: Path):
    """Point ``TMPDIR`` (inherited by the build workers) at ``path`` and remove it afterwards."""
    path.mkdir(parents=True, exist_ok=True)
    old = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if old is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old


def _repeat_cv(secs: list[float]) -> float:
    mean = sum(secs) / len(secs)
    return (sum((x - mean) ** 2 for x in secs) / len(secs)) ** 0.5 / mean if mean > 0 else 0.0


def _timed_build(args: tuple, cpu_limit_s: float | None = None) -> tuple[str, float]:
    """In a build worker: MetaSchedule's build-and-export of one program; returns the
    artifact path and the CPU seconds it took.

    ``cpu_limit_s``: the build's CPU-time limit.  An ``ITIMER_PROF`` timer counts the
    worker's CPU time, and its signal (``SIGPROF``, default action) ends the worker when
    the limit passes, which also stops LLVM's native code generation (a Python-level
    handler could not run before LLVM returns).  A paused worker spends no CPU time, so
    a pause never ends a build."""
    import signal  # pylint: disable=import-outside-toplevel

    from .tvm_compat import build_worker_function  # pylint: disable=import-outside-toplevel

    if cpu_limit_s:
        signal.signal(signal.SIGPROF, signal.SIG_DFL)
        signal.setitimer(signal.ITIMER_PROF, cpu_limit_s)
    start = time.process_time()
    try:
        path = build_worker_function(args)
    finally:
        if cpu_limit_s:
            signal.setitimer(signal.ITIMER_PROF, 0)
    return path, time.process_time() - start


class PooledBuilder:
    """MetaSchedule's build-and-export of each program (``LocalBuilder``'s worker function)
    on long-lived worker processes, fed as a stream.

    ``LocalBuilder.build`` starts a fresh process pool for every batch (each start imports
    TVM again, about 3 s per batch on 2 cores) and returns only when the batch's slowest
    build ends.  Here each of ``max_workers`` threads drives one TVM ``PopenWorker``
    (restarted after ``recycle`` builds, TVM's guard against slow leaks): :meth:`submit`
    queues a batch and returns at once, so the next batch can build while the collector
    samples, and :meth:`paused` stops every worker process and its children (``SIGSTOP``,
    then ``SIGCONT``) while something is timed, so that no build ever runs beside a
    timing.  The build timeout counts each build's CPU time (:func:`_timed_build`), which
    a pause does not advance.  Results are MetaSchedule ``BuilderResult``s, as from
    ``LocalBuilder.build``.  ``f_export`` (``None``: MetaSchedule's tar archive, linked by
    the runner) writes each artifact.

    Attributes:
        build_seconds: CPU seconds each finished build took in its worker, in order.
        timeouts: builds stopped at ``timeout_sec`` seconds of CPU time.
        paused_s: wall seconds the workers spent paused.
    """

    def __init__(self, max_workers: int, timeout_sec: float, f_build, recycle: int = 400, f_export=None):
        import threading  # pylint: disable=import-outside-toplevel

        self.max_workers, self.timeout_sec, self.f_build, self.recycle = max_workers, timeout_sec, f_build, recycle
        self.f_export = f_export
        self._threads = None
        self._local = threading.local()
        self._workers: list = []
        self._cond = threading.Condition()
        self._kill_lock = threading.Lock()  # TVM's PopenWorker.kill is not safe to call from two threads
        self._paused = self._closed = False
        self._pause_start = 0.0
        self.build_seconds: list[float] = []
        self.timeouts = 0
        self.paused_s = 0.0

    def _worker(self):
        from .tvm_compat import popen_worker  # pylint: disable=import-outside-toplevel

        w = getattr(self._local, "worker", None)
        if w is None:
            w = self._local.worker = popen_worker(maximum_uses=self.recycle)
            with self._cond:
                self._workers.append(w)
        return w

    def _build_one(self, args: tuple):
        from .tvm_compat import ms, popen_worker_pid  # pylint: disable=import-outside-toplevel

        w = self._worker()
        with self._cond:  # a worker (re)starts only here, never while paused
            while self._paused and not self._closed:
                self._cond.wait()
            if self._closed:
                return ms.builder.BuilderResult(None, "build failed: the builder was closed")
            w.send(_timed_build, (args, self.timeout_sec), timeout=max(300.0, 10 * self.timeout_sec))
            sent, paused_before, pid = time.perf_counter(), self.paused_s, popen_worker_pid(w)
        try:
            path, secs = w.recv()
        except ChildProcessError:
            self._kill(w)
            with self._cond:
                if self._closed:
                    return ms.builder.BuilderResult(None, "build failed: the builder was closed")
                active = time.perf_counter() - sent - (self.paused_s - paused_before)
            if active >= 0.9 * self.timeout_sec:  # the CPU-time limit's signal ended the worker
                self.timeouts += 1
                return ms.builder.BuilderResult(None, f"build timed out after {self.timeout_sec} s of CPU time")
            return ms.builder.BuilderResult(None, f"build failed: the build worker (pid {pid}) died")
        except TimeoutError:  # TVM's wall-clock limit, a backstop for a build that hangs without CPU time
            return ms.builder.BuilderResult(None, f"build failed: no result after {max(300.0, 10 * self.timeout_sec)} s")
        except Exception as err:  # noqa: BLE001  the worker's own traceback, as LocalBuilder reports it
            return ms.builder.BuilderResult(None, f"build failed:\n{err}")
        self.build_seconds.append(secs)
        return ms.builder.BuilderResult(path, None)

    def submit(self, build_inputs: list) -> list:
        """Queue builds; returns one ``concurrent.futures.Future`` of a ``BuilderResult`` each."""
        from .tvm_compat import serialize_build_params  # pylint: disable=import-outside-toplevel

        if self._threads is None:
            self._threads = concurrent.futures.ThreadPoolExecutor(self.max_workers, thread_name_prefix="cdmpp-build")
        return [self._threads.submit(self._build_one, (self.f_build, self.f_export, b.mod, b.target,
                                                       serialize_build_params(b.params)))
                for b in build_inputs]

    def build(self, build_inputs: list) -> list:
        """Build a batch and wait for it (``LocalBuilder.build``'s interface)."""
        return [f.result() for f in self.submit(build_inputs)]

    def _processes(self) -> list:
        import psutil  # pylint: disable=import-outside-toplevel

        from .tvm_compat import popen_worker_pid  # pylint: disable=import-outside-toplevel

        procs = []
        for w in self._workers:
            pid = popen_worker_pid(w)
            if pid is None:
                continue
            try:
                p = psutil.Process(pid)
                procs.append(p)
                procs.extend(p.children(recursive=True))  # a linker the export started
            except psutil.Error:
                pass
        return procs

    def _signal(self, procs: list, sig: int) -> None:
        import psutil  # pylint: disable=import-outside-toplevel

        for p in procs:
            try:
                p.send_signal(sig)
            except psutil.Error:
                pass

    @staticmethod
    def _wait_stopped(procs: list, timeout_s: float = 2.0) -> None:
        """Return once every process in ``procs`` is stopped, a zombie or gone: ``SIGSTOP``
        lands only when the kernel next schedules the process, which on a busy machine can
        be after ``kill`` returns (at most ``timeout_s`` seconds of polling)."""
        import psutil  # pylint: disable=import-outside-toplevel

        done = {psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD}
        deadline = time.perf_counter() + timeout_s
        pending = list(procs)
        while pending and time.perf_counter() < deadline:
            still = []
            for p in pending:
                try:
                    if p.status() not in done:
                        still.append(p)
                except psutil.Error:
                    pass
            pending = still
            if pending:
                time.sleep(0.001)

    @contextmanager
    def paused(self):
        """Stop every build worker (and the processes it started) for the ``with`` body: no
        build uses the CPU and no worker starts until it ends; queued builds wait."""
        import signal  # pylint: disable=import-outside-toplevel

        with self._cond:
            self._paused, self._pause_start = True, time.perf_counter()
            stopped: list = []
            while True:  # a worker stopped for certain starts no more children; stop those it started
                new = [p for p in self._processes() if p.pid not in {q.pid for q in stopped}]
                if not new:
                    break
                self._signal(new, signal.SIGSTOP)
                self._wait_stopped(new)
                stopped += new
        try:
            yield
        finally:
            with self._cond:
                self._signal(stopped, signal.SIGCONT)
                self._paused = False
                self.paused_s += time.perf_counter() - self._pause_start
                self._cond.notify_all()

    def to_json(self) -> dict:
        """Build times of this run, for the manifest: count, total, median, p99 and max (CPU
        seconds), timeouts."""
        secs = sorted(self.build_seconds)
        pick = (lambda q: round(secs[min(len(secs) - 1, int(q * len(secs)))], 3)) if secs else (lambda q: None)
        return {"built": len(secs), "cpu_total_s": round(sum(secs), 1), "median_s": pick(0.5), "p99_s": pick(0.99),
                "max_s": pick(1.0), "timeouts": self.timeouts, "timeout_s": self.timeout_sec,
                "timeout_counts": "CPU time of the build", "paused_s": round(self.paused_s, 1)}

    def close(self) -> None:
        """Stop the worker processes and drop queued builds (a later build starts new ones)."""
        if self._threads is not None:
            self._threads.shutdown(wait=False, cancel_futures=True)
        with self._cond:
            workers, self._workers = self._workers, []
            self._paused, self._closed = False, True
            self._cond.notify_all()
        for w in workers:
            self._kill(w)
        if self._threads is not None:
            self._threads.shutdown(wait=True)
        self._threads = None
        self._local = type(self._local)()
        self._closed = False

    def _kill(self, worker) -> None:
        """End a worker's process; safe while another thread ends the same one (a build
        thread whose worker :meth:`close` ended sees it die and ends it too)."""
        with self._kill_lock:
            worker.kill()


@dataclass
class _Bench:
    """What times a batch: the builder, the runner and what watches them."""

    builder: object
    runner: object
    target: object
    dev_type: str = "cpu"
    max_cv: float | None = None
    clock: StageClock = field(default_factory=StageClock)
    guard: QuietGuard | None = None
    probe_file: Path | None = None

    def close(self) -> None:
        """Stop the build workers."""
        close = getattr(self.builder, "close", None)
        if close is not None:
            close()

    def read_probe(self) -> float:
        """Add the runner workers' stage times to the clock; returns their sum (seconds)."""
        if self.probe_file is None or not self.probe_file.exists():
            return 0.0
        total = 0.0
        for line in self.probe_file.read_text(encoding="utf-8").splitlines():
            stage, _, secs = line.partition("\t")
            if stage in self.clock.seconds:
                self.clock.add(stage, float(secs))
                total += max(0.0, float(secs))
        self.probe_file.unlink()
        return total


def _run_batch(bench: _Bench, items: list, bounds: dict) -> list:
    """Time built ``(candidate, program_key, build_result)`` items one at a time; runner results in order."""
    from .tvm_compat import RunnerInput  # pylint: disable=import-outside-toplevel

    futures = []
    t0 = time.perf_counter()
    probe = str(bench.probe_file) if bench.probe_file is not None else None
    for key, group in itertools.groupby(items, key=lambda it: bounds[it[1]]):
        with _runner_functions(bench.runner, key, probe) as runner:
            futures += runner.run([RunnerInput(b.artifact_path, bench.dev_type, c.args_info) for c, _, b in group])
    results = [f.result() for f in futures]
    inside = bench.read_probe()
    bench.clock.add("runner start-up", time.perf_counter() - t0 - inside)
    return results


def _timed_quietly(bench: _Bench, items: list, bounds: dict) -> list:
    """:func:`_run_batch` on a quiet machine (:meth:`QuietGuard.run_quietly`)."""
    if bench.guard is None or not items:
        return _run_batch(bench, items, bounds)
    return bench.guard.run_quietly(lambda: _run_batch(bench, items, bounds), _note,
                                   lambda: bench.clock.stage("quiet-machine wait"))


def quiet_runner(inner, guard: QuietGuard, report: Callable[[str], None] | None = None):
    """A MetaSchedule runner that times each batch of ``inner`` (for example a
    ``LocalRunner``, which times a batch before ``run`` returns) on a quiet machine, as
    the collector does: it waits for quiet before a batch, and times a batch again when
    other processes were busy during it (:meth:`QuietGuard.run_quietly`).

    Returns:
        A ``ms.runner.PyRunner`` for ``ms.tune_tir`` / ``tune_relax``; ``guard`` keeps the
        waits, the loads and the batches timed again.
    """
    from .tvm_compat import derived_object, ms  # pylint: disable=import-outside-toplevel

    @derived_object
    class QuietRunner(ms.runner.PyRunner):
        def run(self, runner_inputs):  # pylint: disable=missing-function-docstring
            def batch():
                futures = inner.run(runner_inputs)
                return [ms.runner.LocalRunnerFuture(None if r.run_secs is None else [float(x) for x in r.run_secs],
                                                     r.error_msg) for r in (f.result() for f in futures)]

            return guard.run_quietly(batch, report)

    return QuietRunner()


def _note(message: str) -> None:
    from tqdm import tqdm  # pylint: disable=import-outside-toplevel

    tqdm.write(message)


@dataclass
class _Submitted:
    """A batch whose builds are queued (:func:`_submit_batch`)."""

    fresh: list
    builds: list  # concurrent futures of BuilderResults, or the BuilderResults themselves
    bounds: dict


def _submit_batch(bench: _Bench, fresh: list) -> _Submitted:
    """Queue the builds of ``fresh`` ``(candidate, program_key)`` pairs (on the worker
    processes; a builder without ``submit`` builds them here and now)."""
    from .tvm_compat import BuilderInput  # pylint: disable=import-outside-toplevel

    inputs = [BuilderInput(c.sch.mod, bench.target) for c, _ in fresh]
    submit = getattr(bench.builder, "submit", None)
    if submit is not None:
        builds = submit(inputs) if fresh else []
    else:
        with bench.clock.stage("building"):
            builds = bench.builder.build(inputs) if fresh else []
    bounds = {}
    for c, pk in fresh:
        try:
            bounds[pk] = index_bounds(c.sch.mod)
        except Exception:  # noqa: BLE001  an unforeseen construct: TVM's own fill, as before
            bounds[pk] = ()
    return _Submitted(fresh, builds, bounds)


def _finish_batch(bench: _Bench, batch: _Submitted) -> list[tuple]:
    """Wait for a submitted batch's builds, then time its programs one at a time with the
    build workers paused (:meth:`PooledBuilder.paused`).

    A program whose repeats vary by more than ``bench.max_cv`` (coefficient of
    variation) is timed once more and the steadier of the two measurements is kept.  A
    program that gathers by index gets in-range indices in its integer arguments
    (:func:`index_bounds`).  With a guard, every timing batch runs on a quiet machine.

    Returns:
        ``(candidate, program_key, run_secs or None, stage, error)`` per program.
    """
    if not batch.fresh:
        return []
    out, to_run = [], []
    with bench.clock.stage("building"):  # the part of the builds nothing else overlapped
        built = [b.result() if isinstance(b, concurrent.futures.Future) else b for b in batch.builds]
    for (c, pk), b in zip(batch.fresh, built):
        if b.error_msg:
            out.append((c, pk, None, "build", str(b.error_msg)))
        else:
            to_run.append((c, pk, b))
    pause = getattr(bench.builder, "paused", None)
    bounds = batch.bounds
    timed = {}
    with pause() if pause is not None else contextlib.nullcontext():
        for item, res in zip(to_run, _timed_quietly(bench, to_run, bounds)):
            if res.error_msg or res.run_secs is None:
                timed[item[1]] = (None, "run", str(res.error_msg))
            else:
                timed[item[1]] = ([float(x) for x in res.run_secs], "run", "")
        if bench.max_cv is not None:
            noisy = [it for it in to_run if timed[it[1]][0] is not None and _repeat_cv(timed[it[1]][0]) > bench.max_cv]
            for item, res in zip(noisy, _timed_quietly(bench, noisy, bounds) if noisy else []):
                if not res.error_msg and res.run_secs is not None:
                    again = [float(x) for x in res.run_secs]
                    if _repeat_cv(again) < _repeat_cv(timed[item[1]][0]):
                        timed[item[1]] = (again, "run", "")
    for c, pk, b in to_run:
        shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
        secs, stage, error = timed[pk]
        out.append((c, pk, secs, stage, error))
    return out


def _measure_batch(bench: _Bench, fresh: list) -> list[tuple]:
    """Build ``fresh`` ``(candidate, program_key)`` pairs in parallel, then time them one at
    a time (:func:`_submit_batch`, then :func:`_finish_batch`).

    Returns:
        ``(candidate, program_key, run_secs or None, stage, error)`` per program.
    """
    return _finish_batch(bench, _submit_batch(bench, fresh))


def _manifest(device: DeviceDescriptor, cfg: CollectConfig, old: dict, tasks: list[_Task]) -> dict:
    from .tvm_compat import tvm_version  # pylint: disable=import-outside-toplevel

    entries = {(t["network"], t["task_name"]): t for t in old.get("tasks", [])}
    for t in tasks:
        entries[(t.network, t.task_name)] = {
            **entries.get((t.network, t.task_name), {}),
            "network": t.network,
            "task_name": t.task_name,
            "weight": t.weight,
            "flops": t.flops,
            "workload_key": t.workload_key,
        }
    runs = old.get("collections", [])
    networks = dict(old.get("networks", {}))
    for t in tasks:  # a network's task list is complete once extracted: a restart reuses it
        networks.setdefault(t.network, {"tasks": 0})
    for n in networks:
        if any(t.network == n for t in tasks):
            networks[n] = {"tasks": len({t.task_name for t in tasks if t.network == n})}
    return {
        "format": "cdmpp-dataset/1",
        "device": device.to_json(),
        "tvm_version": tvm_version(),
        "measurement": asdict(cfg.measure),
        "label": "median of run_secs (seconds); every repeat is kept in run_secs",
        "inputs": INPUT_FILL,
        "sampling": {
            "policy": SAMPLING_POLICY,
            "seed": cfg.seed,
            "programs_per_task": cfg.goals[-1],
            "evolutionary_fraction": cfg.evolutionary_fraction,
        },
        "collections": runs,
        "networks": networks,
        "tasks": list(entries.values()),
    }


def _mark_tasks(manifest: dict, device_dir: Path, workload_key: str, field_name: str, value, overwrite: bool) -> None:
    """Set ``field_name`` on every manifest task of the workload (once unless ``overwrite``), then save."""
    changed = False
    for t in manifest["tasks"]:
        if t.get("workload_key") == workload_key and (overwrite or field_name not in t):
            t[field_name] = value
            changed = True
    if changed:
        ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)


def _mark_phase(manifest: dict, device_dir: Path, task: _Task, random_programs: int) -> None:
    """Record, once and before it measures anything, where a task's evolutionary phase begins."""
    for t in manifest["tasks"]:
        if t["network"] == task.network and t["task_name"] == task.task_name and "random_programs" not in t:
            t["random_programs"] = random_programs
            ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)


def _timed_per_store_feature(clock: StageClock):
    """MetaSchedule's ``PerStoreFeature`` (XGBModel's default features, the same values),
    its time counted as the ``"cost model features"`` stage of ``clock``."""
    from .tvm_compat import derived_object, ms  # pylint: disable=import-outside-toplevel

    @derived_object
    class TimedPerStoreFeature(ms.feature_extractor.PyFeatureExtractor):
        def __init__(self):
            super().__init__()
            self.inner = ms.feature_extractor.PerStoreFeature()

        def extract_from(self, context, candidates):
            with clock.stage("cost model features"):
                return self.inner.extract_from(context, candidates)

    return TimedPerStoreFeature()


def sampling_threads(cores: int, tasks_in_flight: int) -> int:
    """Threads of a task's search (and its XGBoost) while ``tasks_in_flight - 1`` other
    tasks' batches build: every core for one task at a time, else half of them (at least
    one), so that the sampling and the build workers share the cores.

    On 2 cores that is 1 (two sampling threads only spun against the builders: XGBoost
    training went from 1.9 s to 16.1 s); on a 16-core GPU host it is 8 (one thread made
    CUDA random sampling, which rejects most draws in ``VerifyGPUCode``, 9x slower per
    program than 16 threads and 90% of the wall time)."""
    return cores if tasks_in_flight <= 1 else max(1, cores // 2)


def _tune_context(
    task: _Task, target, device: DeviceDescriptor, phase: str, seed: int, store: _Store, workload, population: int,
    cost_model=None, clock: StageClock | None = None, threads: int | None = None,
):
    """A TuneContext for one sampling phase, and the phase's cost model (``None`` for random).

    ``cost_model``: the task's XGBModel from an earlier visit of this run, which has learnt
    every program of the task measured so far; ``None`` makes a new one and trains it on
    them (replaying each record's trace for its features).  ``threads``: threads of the
    search and of XGBoost (``None``: all cores; see :func:`sampling_threads`)."""
    threads = threads or device.cores
    from .tvm_compat import ms  # pylint: disable=import-outside-toplevel

    if phase == "random":
        strategy, cost_model = ms.search_strategy.ReplayTrace(max_fail_count=64), None
    else:
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=population, init_min_unmeasured=min(32, population // 2)
        )
    fresh_model = phase != "random" and cost_model is None
    if fresh_model:
        extractor = _timed_per_store_feature(clock) if clock is not None else "per-store-feature"
        cost_model = ms.cost_model.XGBModel(extractor=extractor, num_warmup_samples=0, verbose_eval=1 << 30,
                                            num_tuning_cores=threads)
    ctx = ms.TuneContext(
        task.mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=task.task_name,
        rand_state=seed,
        num_threads=threads,
    )
    if fresh_model:  # learn from every program of the task measured so far
        records = store.db.get_top_k(workload, 1 << 30)
        cands = [r.as_measure_candidate() for r in records]
        cost_model.update(ctx, cands, [ms.runner.RunnerResult(r.run_secs, None) for r in records])
    return ctx, cost_model


def _plan_tasks(cfg: CollectConfig, device_dir: Path, store: _Store, target, clock: StageClock):
    """Every task of the networks (from the manifest, or extracted), filed under its workload.

    Returns:
        ``(tasks of all networks, the tasks to visit in round-robin order over networks,
        workload by key)``.
    """
    per_network = []
    known = _known_tasks(ds.read_manifest(device_dir), device_dir)
    with clock.stage("task extraction"):
        for n in cfg.networks:
            per_network.append(known.get(n) or extract_network_tasks(n, target))
    workloads = {}
    with clock.stage("writing"):
        for t in itertools.chain.from_iterable(per_network):  # every task is listed, measured or not
            wl, t.workload_key = store.workload(t.mod)
            workloads[t.workload_key] = wl
            # Structural equality ignores block and buffer names, so tasks of two networks can
            # share one workload whose module names its blocks differently (``lv229_red`` and
            # ``lv239_red``).  Sample on the workload's own module, so that every stored schedule
            # trace replays on the workload it is filed under.
            t.mod = wl.mod
    every = list(itertools.chain.from_iterable(per_network))
    if cfg.max_tasks_per_network is not None:
        per_network = [net_tasks[: cfg.max_tasks_per_network] for net_tasks in per_network]
    # round-robin over networks, so that a collection stopped early covers every network
    visit = [t for group in itertools.zip_longest(*per_network) for t in group if t is not None]
    return every, visit, workloads


def _local_bench(m: MeasureConfig, target, dev_type: str, quiet: QuietConfig | None, probe_file: Path | None = None,
                 clock: StageClock | None = None) -> _Bench:
    """A builder on all cores, a ``LocalRunner`` (one program at a time) and, unless ``quiet`` is
    ``None``, the quiet-machine guard."""
    from .tvm_compat import LocalRunner, build_for_measurement, export_shared_library  # pylint: disable=import-outside-toplevel

    # linked into a shared library by the build workers, in parallel, not by the one runner
    builder = PooledBuilder(m.build_workers or os.cpu_count() or 1, m.build_timeout_s, build_for_measurement,
                            f_export=export_shared_library if dev_type == "cpu" else None)
    runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=m.evaluator_config(),
                         f_run_evaluator=m.run_evaluator())
    guard = QuietGuard(quiet) if quiet is not None else None
    return _Bench(builder, runner, target, dev_type, m.max_repeat_cv, clock or StageClock(), guard, probe_file)


def _make_bench(cfg: CollectConfig, device: DeviceDescriptor, target, clock: StageClock, tmp: Path) -> _Bench:
    """The collection's builder and runner (local, or through an RPC tracker) and its guard."""
    from .tvm_compat import RPCConfig, RPCRunner  # pylint: disable=import-outside-toplevel

    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    bench = _local_bench(cfg.measure, target, dev_type, cfg.quiet, tmp / "runner-stages.tsv", clock)
    if cfg.rpc is not None:  # RPC boards are timed elsewhere: no guard on this host
        m, r = cfg.measure, cfg.rpc
        bench.runner = RPCRunner(
            RPCConfig(r.tracker_host, r.tracker_port, r.device_key, session_timeout_sec=r.session_timeout_s),
            evaluator_config=m.evaluator_config(),
            max_workers=r.parallel_sessions,
        )
        bench.builder.f_export = None  # a tar archive, linked on the board by its own toolchain
        bench.guard = None
    return bench


class _Collection:
    """One ``collect`` call: its store, manifest, bench and counts; visits tasks one by one."""

    def __init__(self, cfg, device, device_dir, store, manifest, bench, workloads, should_stop, progress=True):
        self.cfg, self.device, self.dir, self.progress = cfg, device, device_dir, progress
        self.store, self.manifest, self.bench, self.workloads = store, manifest, bench, workloads
        self.should_stop = should_stop
        self.measured = self.failed = self.dups = self.task_errors = 0
        self.stopped = False
        self.bar = None
        self._last_pack = time.time()
        self._models: dict[str, object] = {}  # each task's evolutionary-phase XGBModel, by workload key

    def stop_requested(self) -> bool:
        return self.should_stop is not None and bool(self.should_stop())

    def exhausted(self, key: str) -> bool:
        """Whether an earlier visit found this workload's design space used up."""
        return any(t.get("workload_key") == key and "space_exhausted_at" in t for t in self.manifest["tasks"])

    def visit(self, task: _Task, goal: int):
        """Sample, measure and record programs of one task until it has ``goal`` (or its space runs out).

        A generator: it yields each batch of fresh ``(candidate, program_key)`` pairs to
        measure and is sent back their :func:`_finish_batch` results, so that
        :meth:`run_round` can build one task's batch while another task samples."""
        key, wl, cfg = task.workload_key, self.workloads[task.workload_key], self.cfg
        need = goal - self.store.done.get(key, 0)
        self.bar.set_postfix_str(f"{task.network}:{task.task_name}"[:40])
        earlier_failures = self.store.failed.get(key, 0) if cfg.retry_failed else 0
        with self.bench.clock.stage("de-duplication"):
            seen = (set() if cfg.retry_failed else set(self.store.failed_keys.get(key, set()))) | (
                self.store.measured_program_keys(wl, key) if self.store.done.get(key) else set()
            )
        n_random = goal - round(goal * cfg.evolutionary_fraction)
        seed = _task_seed(cfg.seed, key, self.store.done.get(key, 0))
        for phase in ("random", "evolutionary"):
            if need <= 0 or self.stop_requested():
                break
            done = self.store.done.get(key, 0)
            if phase == "random":
                want = min(need, n_random - done)
                if want <= 0:
                    continue
            elif not done or cfg.evolutionary_fraction <= 0:  # random only, or nothing to learn from
                break
            else:
                want = need
                _mark_phase(self.manifest, self.dir, task, done)
            if (yield from self._phase(task, wl, phase, want, seen, seed, goal, earlier_failures)):
                _mark_tasks(self.manifest, self.dir, key, "space_exhausted_at", self.store.done.get(key, 0), True)
                break
            need = goal - self.store.done.get(key, 0)
        if need > 0 and not self.stop_requested():  # the design space ran out of distinct programs
            self.bar.total -= need
            self.bar.refresh()

    def _phase(self, task, wl, phase, want, seen, seed, goal, earlier_failures):
        """One sampling phase of a task, a generator as :meth:`visit`; returns whether a whole
        batch was already seen (space used up)."""
        from .tvm_compat import TuningRecord, ms  # pylint: disable=import-outside-toplevel

        cfg, key, clock = self.cfg, task.workload_key, self.bench.clock
        sampling = "random sampling" if phase == "random" else "evolutionary search"
        with clock.stage("cost model training" if phase != "random" else sampling):
            ctx, cost_model = _tune_context(
                task, self.bench.target, self.device, phase, seed, self.store, wl, cfg.evolutionary_population,
                self._models.get(key), clock, sampling_threads(self.device.cores, cfg.tasks_in_flight),
            )
        if cost_model is not None:  # it learns each batch timed below; later rounds of this run reuse it
            self._models[key] = cost_model
        with clock.stage(sampling):
            ctx.pre_tuning(
                max_trials=want * 4,
                num_trials_per_iter=cfg.batch_size,
                database=self.store.db if cost_model is not None else None,
                cost_model=cost_model,
            )
        attempts, exhausted = 0, False
        give_up = max(8, goal // 4)  # failures with no success: the task cannot run here
        while want > 0 and attempts < goal * 4 and not self.stop_requested():
            if self.store.failed.get(key, 0) - earlier_failures >= give_up and not self.store.done.get(key):
                break
            with clock.stage(sampling):
                cands = ctx.generate_measure_candidates()
            if not cands:
                break
            attempts += len(cands)
            fresh = self._fresh(cands, seen)
            if not fresh:  # a whole round of programs already seen: the space is used up
                exhausted = True
                break
            batch = yield fresh[:want]
            results = self._record(task, wl, batch, TuningRecord)
            want -= len(results)
            outcome = [results.get(id(c), ms.runner.RunnerResult(None, "not measured")) for c in cands]
            with clock.stage(sampling):
                ctx.notify_runner_results(cands, outcome)
            if cost_model is not None and results:  # only what was timed in this batch
                with clock.stage("cost model training"):
                    timed = [c for c in cands if id(c) in results]
                    cost_model.update(ctx, timed, [results[id(c)] for c in timed])
        with clock.stage(sampling):
            ctx.post_tuning()
        return exhausted

    def _fresh(self, cands: list, seen: set) -> list:
        """The candidates not measured (or failed) before, with their program keys."""
        fresh = []
        with self.bench.clock.stage("de-duplication"):
            for c in cands:
                pk = _program_key(c.sch.mod)
                if pk in seen:
                    self.dups += 1
                    continue
                seen.add(pk)
                fresh.append((c, pk))
        return fresh

    def _record(self, task: _Task, wl, batch: list, record_type) -> dict:
        """Store a measured batch: records and failures; returns runner results of the successes by candidate id."""
        from .tvm_compat import ms  # pylint: disable=import-outside-toplevel

        results = {}
        interrupted = self.stop_requested()
        with self.bench.clock.stage("writing"):
            for c, pk, secs, stage, error in batch:
                record = record_type(c.sch.trace, wl, secs, self.bench.target, c.args_info)
                if secs is None and interrupted:
                    continue  # the stop signal may have killed its worker: measure it again next time
                if secs is None:
                    self.store.add_failure(task, pk, stage, error, record)
                    self.failed += 1
                    continue
                self.store.add_record(record, task.workload_key, pk)
                self.measured += 1
                self.bar.update(1)
                results[id(c)] = ms.runner.RunnerResult(secs, None)
        return results

    def task_failed(self, task: _Task, err: Exception) -> None:
        """Keep one task's TVM error in the manifest; the collection goes on."""
        self.task_errors += 1
        message = f"{type(err).__name__}: {err}"
        self.manifest["collections"][-1].setdefault("task_errors", []).append(
            {
                "network": task.network,
                "task_name": task.task_name,
                "workload_key": task.workload_key,
                "error": message[-4000:],
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        )
        ds.write_json_atomic(self.dir / ds.MANIFEST_FILE, self.manifest)
        _note(
            f"{task.network}:{task.task_name}: skipped after {message.splitlines()[0][:200]} "
            "(kept in the manifest; the next collection tries it again)"
        )

    def checkpoint(self, final: bool) -> None:
        """Write the manifest's counts, stage times and guard figures so far and, when asked to, the packed files."""
        entry = self.manifest["collections"][-1]
        entry.update({"measured": self.measured, "failed": self.failed, "stage_seconds": self.bench.clock.to_json()})
        if isinstance(self.bench.builder, PooledBuilder):
            entry["build_seconds"] = self.bench.builder.to_json()
        if self.bench.guard is not None:
            entry["quiet_machine"] = self.bench.guard.to_json()
        if final:
            entry.update({"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "stopped_early": self.stopped})
        ds.write_json_atomic(self.dir / ds.MANIFEST_FILE, self.manifest)
        if self.cfg.pack_every_s is not None:
            ds.pack(self.dir)

    def maybe_pack(self) -> None:
        """Between tasks (no timing in flight): the periodic checkpoint of ``pack_every_s``."""
        if self.cfg.pack_every_s is not None and time.time() - self._last_pack >= self.cfg.pack_every_s:
            self.checkpoint(final=False)
            self._last_pack = time.time()

    def _advance(self, task: _Task, goal: int, steps, measured, inflight: list) -> None:
        """Run one task's visit (``steps``; ``None``: start it) until it asks for its next batch
        (queued for building and appended to ``inflight``) or ends; a TVM error ends only
        that task."""
        try:
            steps = self.visit(task, goal) if steps is None else steps
            fresh = steps.send(measured)
        except StopIteration:
            return
        except MachineBusyError:
            raise  # the machine, not the task: stop, every finished record is stored
        except Exception as err:  # noqa: BLE001  one task's TVM error must not end the collection
            if self.stop_requested():
                raise  # a stop signal that landed inside a TVM callback
            self.task_failed(task, err)
            return
        inflight.append((task, steps, _submit_batch(self.bench, fresh)))

    def run_round(self, tasks: list[_Task], goal: int) -> None:
        """Visit every task once, towards ``goal`` programs each.

        With ``tasks_in_flight`` 2, two tasks are in flight at a time: while one task's
        batch builds on the worker processes, the other samples its next batch (or records
        its last), and a batch is timed only once its own builds are done, with every build
        worker paused, so that sampling and building overlap but nothing runs beside a
        timing."""
        from tqdm import tqdm  # pylint: disable=import-outside-toplevel

        todo = {}
        for t in tasks:
            # a used-up space still holds the failed programs that retry_failed times again
            if not self.exhausted(t.workload_key) or self.cfg.retry_exhausted or self.cfg.retry_failed:
                todo.setdefault(t.workload_key, t)
        total = len(todo) * goal
        already = sum(min(self.store.done.get(k, 0), goal) for k in todo)
        desc = f"{self.device.device_id} to {goal}/task"
        self.bar = tqdm(total=total, initial=already, disable=not self.progress, unit="prog", desc=desc, smoothing=0.05)
        waiting = iter(todo.items())
        inflight: list = []
        try:
            while not self.stop_requested():
                while len(inflight) < self.cfg.tasks_in_flight and not self.stop_requested():
                    nxt = next(((k, t) for k, t in waiting if goal - self.store.done.get(k, 0) > 0), None)
                    if nxt is None:
                        break
                    self.maybe_pack()
                    self._advance(nxt[1], goal, None, None, inflight)
                if not inflight or self.stop_requested():
                    break
                task, steps, submitted = inflight.pop(0)
                self._advance(task, goal, steps, _finish_batch(self.bench, submitted), inflight)
        finally:
            for _, steps, _ in inflight:  # batches not timed: their programs are sampled again next time
                steps.close()
            self.bar.close()
            # also when a stop signal ends the round with an exception (one landing in a TVM call)
            self.stopped = self.stop_requested()


def collect(
    cfg: CollectConfig, progress: bool = True, should_stop: Callable[[], bool] | None = None
) -> CollectSummary:
    """Measure programs of the given networks' tasks on the local CPU; resumable.

    Args:
        cfg: what to collect and how to measure it.
        progress: show a progress bar with an ETA on stderr.
        should_stop: polled between measurement batches; when it returns True the
            collection ends after the batch in flight, with every finished record stored
            (``cdmpp collect`` sets it on the first Ctrl-C).

    Returns:
        Counts of what this call added (``stopped`` tells whether ``should_stop`` ended
        it), and the wall seconds of each stage (``stage_seconds``).

    Raises:
        KeyError: an unknown network name.
        InputError: ``cfg.evolutionary_fraction`` above 0 without the xgboost package, or
            ``cfg.tasks_in_flight`` other than 1 or 2 (nothing is written).
        DeviceUnavailableError: ``cfg.gpu`` and no CUDA GPU, or no CUDA compiler (nvcc or
            NVRTC), on this host (nothing is written).
        MachineBusyError: the quiet-machine guard waited longer than ``cfg.quiet.max_wait_s``
            (every record finished before is stored).
    """
    # pylint: disable=import-outside-toplevel
    from dataclasses import replace

    from . import networks as zoo
    from .tvm_compat import Target, configure_cuda_compiler, load_tensor_intrinsics

    for n in cfg.networks:
        zoo.get_network(n)  # fail early on a bad name
    if cfg.tasks_in_flight not in (1, 2):
        raise InputError(f"tasks_in_flight must be 1 or 2, got {cfg.tasks_in_flight}")
    if cfg.evolutionary_fraction > 0 and importlib.util.find_spec("xgboost") is None:
        # else every task fails at its first evolutionary batch (a GPU host without xgboost did)
        raise InputError(
            f"evolutionary_fraction {cfg.evolutionary_fraction} needs the xgboost package (MetaSchedule's XGBModel "
            "guides the evolutionary phase), which this Python lacks: install it, or collect random samples only "
            "(--evolutionary-fraction 0)"
        )
    start = time.time()
    compile_mode = None
    if cfg.gpu:
        device = local_gpu(num_cores=cfg.num_cores)  # raises before anything is written
        try:
            compile_mode = configure_cuda_compiler()
        except RuntimeError as err:
            raise DeviceUnavailableError(str(err)) from err
        cfg = replace(cfg, measure=replace(cfg.measure, enable_cpu_cache_flush=False))
    else:
        device = local_cpu(cfg.num_cores, cfg.disable_avx512)
    if cfg.rpc is not None:  # the RPC runner's evaluator is MetaSchedule's: every repeat
        cfg = replace(cfg, measure=replace(cfg.measure, adaptive_repeats=None))
    target = Target(device.target)
    device_dir = Path(cfg.out_dir) / device.device_id
    store = _Store(device_dir)
    clock = StageClock()
    every, visit, workloads = _plan_tasks(cfg, device_dir, store, target, clock)
    manifest = _manifest(device, cfg, ds.read_manifest(device_dir), every)
    manifest["collections"].append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "networks": cfg.networks,
            "measurement": asdict(cfg.measure),
            "seed": cfg.seed,
            "rounds": list(cfg.goals),
            "evolutionary_population": cfg.evolutionary_population,
            "tasks_in_flight": cfg.tasks_in_flight,
            # runs without this field seeded each task from the base seed and its workload key only
            "task_seed": "base seed, workload key and the task's programs measured before the visit",
            "runner": "local" if cfg.rpc is None else {"rpc": asdict(cfg.rpc)},
        }
    )
    if compile_mode is not None:  # how TVM turned the generated CUDA C into a GPU binary
        manifest["collections"][-1]["cuda_compile_mode"] = compile_mode
    ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
    with _build_tmpdir(device_dir / ".tmp") as tmp:  # build artifacts of the worker processes
        load_tensor_intrinsics(target)
        bench = _make_bench(cfg, device, target, clock, tmp)
        run = _Collection(cfg, device, device_dir, store, manifest, bench, workloads, should_stop, progress)
        try:
            for goal in cfg.goals:
                run.run_round(visit, goal)
                if run.stopped:
                    break
        finally:
            try:
                bench.close()
            finally:  # the manifest's end of this collection, even when closing fails
                run.checkpoint(final=True)
    return CollectSummary(
        device.device_id, device_dir, run.measured, run.failed, run.dups, time.time() - start, run.stopped,
        run.task_errors, clock.to_json(),
    )


def sample_schedules(mod, target, count: int, seed: int = 0) -> list:
    """Uniform random schedules of one task's design space, not measured (the collector's
    random phase: ``ReplayTrace`` over MetaSchedule's post-order-apply space).

    Works for any target TVM can generate code for, so CUDA programs can be sampled,
    featurized and built on a machine without the GPU; only timing them needs it.

    Args:
        mod: the task's workload, an IRModule with one PrimFunc.
        target: TVM ``Target`` (or dict / tag) whose default schedule rules span the space.
        count: schedules wanted; fewer come back when the space has fewer distinct ones.
        seed: random seed of the sampling.

    Returns:
        Up to ``count`` ``Schedule`` objects (``.mod`` the scheduled IRModule, ``.trace``
        its schedule trace).
    """
    # pylint: disable=import-outside-toplevel
    from .tvm_compat import Target, load_tensor_intrinsics, ms

    target = target if isinstance(target, Target) else Target(target)
    load_tensor_intrinsics(target)
    ctx = ms.TuneContext(
        mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=64),
        task_name="sample",
        rand_state=seed,
        num_threads=1,
    )
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count, database=None, cost_model=None)
    cands = ctx.generate_measure_candidates() or []
    ctx.post_tuning()
    return [c.sch for c in cands][:count]


def import_database(workload_db: Path, record_db: Path, device_id: str, out_dir: Path, network: str = "imported") -> int:
    """Add the measured records of any MetaSchedule JSONDatabase to a dataset.

    Records go to ``out_dir/<device_id>/``; programs already there (same structural
    hash) are skipped, so importing twice adds nothing.  Each workload becomes a task
    of ``network`` with weight 1 in the manifest.

    Returns:
        The number of records added.

    Raises:
        DatasetError: missing files or no measured record.
        ValueError: a device id that is not a plain folder name.
    """
    from .tvm_compat import TuningRecord, estimate_tir_flops, tvm_version  # pylint: disable=import-outside-toplevel

    if not device_id or "/" in device_id or device_id.startswith("."):
        raise InputError(f"device id {device_id!r} must be a plain folder name")
    src = ds.load_database(Path(workload_db), Path(record_db), device_id)
    device_dir = Path(out_dir) / device_id
    store = _Store(device_dir)
    manifest = ds.read_manifest(device_dir)
    tasks = {(t["network"], t["task_name"]): t for t in manifest.get("tasks", [])}
    known: dict[str, set[str]] = {}
    added = 0
    for p in src.programs:
        wl, key = store.workload(p.record.workload.mod)
        if key not in known:
            known[key] = store.measured_program_keys(wl) if store.done.get(key) else set()
            try:
                flops = float(estimate_tir_flops(wl.mod))
            except Exception:  # noqa: BLE001
                flops = 0.0
            tasks.setdefault(
                (network, key), {"network": network, "task_name": key, "weight": 1, "flops": flops, "workload_key": key}
            )
        from .featurize import as_module  # pylint: disable=import-outside-toplevel

        pk = _program_key(as_module(p.record))
        if pk in known[key]:
            continue
        known[key].add(pk)
        r = p.record
        store.add_record(TuningRecord(r.trace, wl, [float(s) for s in p.run_secs], r.target, r.args_info), key)
        added += 1
    target = src.programs[0].record.target
    manifest.setdefault("format", "cdmpp-dataset/1")
    manifest.setdefault(
        "device",
        {"device_id": device_id, "kind": "imported", "model": device_id, "cores": 0, "isa": "",
         "isa_flags": [], "target": json.loads(str(target)) if target is not None else {}},
    )
    manifest.setdefault("tvm_version", tvm_version())
    manifest.setdefault("imports", []).append(
        {"workload_db": str(workload_db), "record_db": str(record_db), "added": added, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    )
    manifest["tasks"] = list(tasks.values())
    ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
    return added


def remeasure(
    device_dir: Path,
    sample: int = 100,
    seed: int = 0,
    measure: MeasureConfig | None = None,
    progress: bool = True,
    quiet: QuietConfig | None = None,
) -> Path:
    """Time a random sample of a device folder's measured programs again, to measure drift.

    Each program is rebuilt from its tuning record and timed with the same protocol
    (no re-timing of noisy repeats), on this host, which must be the device that
    measured the folder.  One JSON line per program is appended to
    ``remeasured.jsonl``: ``workload_key``, ``program_key``, ``run_secs`` (stored,
    seconds), ``again`` (the new repeats, seconds; empty on failure), ``error`` and
    ``time``.  Programs already re-measured are skipped, so it resumes.  The
    quiet-machine guard (``quiet``, default on) holds every timing batch.

    Returns:
        The path of ``remeasured.jsonl``.

    Raises:
        DatasetError: no measured program.
        ValueError: this host is not the folder's device.
    """
    # pylint: disable=import-outside-toplevel
    import random
    from types import SimpleNamespace

    from tqdm import tqdm

    from .tvm_compat import (
        Target,
        configure_cuda_compiler,
        program_from_record,
    )

    db = ds.load_device_dir(Path(device_dir))
    if not db.programs:
        raise ds.DatasetError(f"{device_dir}: no measured program to re-measure")
    devices = {d.device_id: d for d in (local_cpu(), local_cpu(disable_avx512=True))}
    if db.device_id.startswith("gpu-"):
        try:
            gpu = local_gpu()
            devices[gpu.device_id] = gpu
        except DeviceUnavailableError:
            pass
    if db.device_id not in devices:
        raise InputError(f"this host is {', '.join(devices)}, not {db.device_id}: it cannot re-measure that folder")
    device = devices[db.device_id]
    target = Target(device.target)
    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    if dev_type == "cuda":
        configure_cuda_compiler()
    # a folder measured before adaptive repeats existed is timed again with every repeat
    m = measure or MeasureConfig(**{"adaptive_repeats": None, **db.manifest.get("measurement", {})})
    out = Path(device_dir) / ds.REMEASURE_FILE
    ds.unpack(out)  # keep the shipped re-measurements: pack rewrites the .gz from this file
    done = {o["program_key"] for _, o in ds.iter_json_lines(out)} if out.exists() else set()
    order = list(range(len(db.programs)))
    random.Random(seed).shuffle(order)
    picked = []
    for i in order[:sample]:
        p = db.programs[i]
        mod = program_from_record(p.record)
        pk = _program_key(mod)
        if pk not in done:
            picked.append((p, mod, pk))
    from dataclasses import replace  # pylint: disable=import-outside-toplevel

    bench = _local_bench(replace(m, max_repeat_cv=None), target, dev_type, quiet or QuietConfig())
    bar = tqdm(total=len(picked), disable=not progress, unit="prog", desc="re-measuring")
    for s in range(0, len(picked), 16):
        chunk = picked[s : s + 16]
        fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk) for p, mod, pk in chunk]
        timed = {pk: (secs, err) for _, pk, secs, _, err in _measure_batch(bench, fresh)}
        with open(out, "a", encoding="utf-8") as f:
            for p, _, pk in chunk:
                secs, err = timed[pk]
                line = {
                    "workload_key": db.workload_keys[p.workload_index],
                    "program_key": pk,
                    "run_secs": [float(x) for x in p.run_secs],
                    "again": secs or [],
                    "error": err,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
                f.write(json.dumps(line) + "\n")
                f.flush()
        bar.update(len(chunk))
    bar.close()
    bench.close()
    return out


def measure_programs(
    source_dir: Path,
    index,
    out_dir: Path,
    measure: MeasureConfig | None = None,
    disable_avx512: bool = False,
    note: str = "",
    progress: bool = True,
    quiet: QuietConfig | None = None,
) -> CollectSummary:
    """Time chosen programs of a device folder measured elsewhere, on this host.

    For few-shot transfer to this host's CPU (CDMPP, EuroSys 2024, section 5): the
    programs ``index`` of ``source_dir`` (positions in its tuning-record file, as in
    :func:`cdmpp.dataset.load_device_dir`) are rebuilt from their schedule traces,
    built for this host's target on all cores and timed one at a time with the
    collector's protocol.  They go to ``out_dir/<this device id>/`` as tuning records,
    with their tasks (network, task weight, FLOPs) copied from the source manifest.
    Every finished record is stored at once; a failed build or run goes to
    ``failures.jsonl``.  Programs already measured or failed there are skipped, so a
    stopped call resumes.

    Args:
        index: int positions ``(K,)`` of the programs to measure.
        note: how the programs were chosen, recorded in the manifest.
        quiet: the quiet-machine guard (default :class:`QuietConfig`: on).

    Returns:
        Counts of what this call added.

    Raises:
        DatasetError: the source folder has no measured program.
        IndexError: a position outside the source's programs.
    """
    # pylint: disable=import-outside-toplevel
    from types import SimpleNamespace

    from tqdm import tqdm

    from .tvm_compat import (
        Target,
        TuningRecord,
        load_tensor_intrinsics,
        program_from_record,
        tvm_version,
    )

    start = time.time()
    src = ds.load_device_dir(Path(source_dir))
    if not src.programs:
        raise ds.DatasetError(f"{source_dir}: no measured program to choose from")
    index = [int(i) for i in index]
    bad = [i for i in index if not 0 <= i < len(src.programs)]
    if bad:
        raise InputError(f"program positions {bad[:5]} are outside the {len(src.programs)} programs of {source_dir}")
    device = local_cpu(disable_avx512=disable_avx512)
    target = Target(device.target)
    m = measure or MeasureConfig()
    device_dir = Path(out_dir) / device.device_id
    store = _Store(device_dir)
    manifest = ds.read_manifest(device_dir)
    src_tasks = src.tasks_by_workload()
    tasks = {(t["network"], t["task_name"]): t for t in manifest.get("tasks", [])}
    todo, seen = [], {}
    for i in index:
        p = src.programs[i]
        wl, key = store.workload(p.record.workload.mod)
        if key not in seen:
            seen[key] = store.failed_keys.get(key, set()) | (
                store.measured_program_keys(wl) if store.done.get(key) else set()
            )
        for t in src_tasks.get(src.workload_keys[p.workload_index], []):
            tasks.setdefault((t["network"], t["task_name"]), {**t, "workload_key": key})
        mod = program_from_record(p.record)
        pk = _program_key(mod)
        if pk in seen[key]:
            continue
        seen[key].add(pk)
        todo.append((p, wl, key, mod, pk))
    networks = dict(manifest.get("networks", {}))
    for t in tasks.values():
        networks.setdefault(t["network"], {"tasks": 0})
    manifest = {
        "format": "cdmpp-dataset/1",
        "device": device.to_json(),
        "tvm_version": tvm_version(),
        "measurement": asdict(m),
        "label": "median of run_secs (seconds); every repeat is kept in run_secs",
        "sampling": manifest.get("sampling")
        or {"policy": f"chosen programs of {source_dir}, measured again on this device", "seed": None},
        "collections": manifest.get("collections", []),
        "networks": networks,
        "tasks": list(tasks.values()),
    }
    manifest["collections"].append(
        {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": str(source_dir), "chosen": len(index), "note": note}
    )
    ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)

    load_tensor_intrinsics(target)
    bench = _local_bench(m, target, "cpu", quiet or QuietConfig())
    measured = failed = 0
    bar = tqdm(total=len(todo), disable=not progress, unit="prog", desc=device.device_id)
    try:
        for s in range(0, len(todo), 16):
            chunk = todo[s : s + 16]
            fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk) for p, _, _, mod, pk in chunk]
            timed = {pk: (secs, stage, err) for _, pk, secs, stage, err in _measure_batch(bench, fresh)}
            for p, wl, key, _, pk in chunk:
                secs, stage, err = timed[pk]
                record = TuningRecord(p.record.trace, wl, secs, target, p.record.args_info)
                if secs is None:
                    t = next(iter(src_tasks.get(src.workload_keys[p.workload_index], [])), {})
                    task = _Task(t.get("network", "?"), t.get("task_name", key), 1, 0.0, None, key)
                    store.add_failure(task, pk, stage, err, record)
                    failed += 1
                    continue
                store.add_record(record, key)
                measured += 1
            bar.update(len(chunk))
    finally:
        bar.close()
        bench.close()
        manifest["collections"][-1].update(
            {"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "measured": measured, "failed": failed}
        )
        ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
    return CollectSummary(device.device_id, device_dir, measured, failed, len(index) - len(todo), time.time() - start)
