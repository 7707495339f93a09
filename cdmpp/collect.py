"""``cdmpp collect``: sample schedules of real networks' tasks and measure them.

Pipeline per network (TenSet, NeurIPS 2021, section 3, on MetaSchedule instead of
Ansor): the network, defined in code, is lowered through Relax and its MetaSchedule
tuning tasks are extracted with their task weights.  For each task, schedules are
sampled from its design space (``ReplayTrace``: random decisions over the
post-order-apply design space), built on all cores, then timed one at a time on the
local CPU.  Every success is committed at once to the device's JSONDatabase; every
failed build or run goes to ``failures.jsonl`` with its error.

Resuming: the database files are append-only and a program's structural hash is its
identity, so a restarted collection skips the programs already measured (or failed,
unless ``retry_failed``) and continues until each task has ``programs_per_task``
measurements.

Inputs: the runner fills every argument with TVM's random fill, except the integer
index arguments of gathers (``take``), which get in-range indices (:func:`index_bounds`).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

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
        build_timeout_s: per-program build timeout in seconds.
        run_timeout_s: per-program run timeout in seconds.
        build_workers: parallel build processes (``None``: all cores).
        max_repeat_cv: a program whose repeats' coefficient of variation exceeds this
            is timed once more, and the steadier measurement is kept (``None``: never).
    """

    number: int = 1
    repeat: int = 10
    min_repeat_ms: int = 0
    enable_cpu_cache_flush: bool = True
    build_timeout_s: float = 60.0
    run_timeout_s: float = 30.0
    build_workers: int | None = None
    max_repeat_cv: float | None = 0.2


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
        evolutionary_population: population of that search; each round costs about
            ``4 * population`` schedule mutations and cost-model predictions.
        measure: the timing protocol.
        rpc: measure through an RPC tracker (``None``: on this host, with ``LocalRunner``).
        gpu: measure on this host's NVIDIA GPU (CUDA target, device id ``gpu-<name>-sm<XY>``)
            instead of its CPU; the CPU cache flush is then switched off.
        retry_failed: time again the programs that failed in an earlier collection (after
            fixing what made them fail); their old lines stay in ``failures.jsonl``.
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
    evolutionary_population: int = 128
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    rpc: RPCSettings | None = None
    gpu: bool = False
    pack_every_s: float | None = None
    retry_failed: bool = False


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
        if (device_dir / ds.FAILURE_FILE).exists():
            for _, obj in ds.iter_json_lines(device_dir / ds.FAILURE_FILE):
                self.failed[obj["workload_key"]] = self.failed.get(obj["workload_key"], 0) + 1
                self.failed_keys.setdefault(obj["workload_key"], set()).add(obj["program_key"])

    def workload(self, mod):
        wl = self.db.commit_workload(mod)
        return wl, str(wl.as_json()[0])

    def measured_program_keys(self, workload) -> set[str]:
        """Structural hashes of this workload's measured programs (rebuilt from their traces)."""
        from .tvm_compat import Schedule  # pylint: disable=import-outside-toplevel

        keys = set()
        for rec in self.db.get_top_k(workload, 1 << 30):
            sch = Schedule(workload.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            keys.add(_program_key(sch.mod))
        return keys

    def add_record(self, record, workload_key: str) -> None:
        """Commit a measured tuning record (flushed at once by the JSONDatabase)."""
        self.db.commit_tuning_record(record)
        self.done[workload_key] = self.done.get(workload_key, 0) + 1

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


def _use_index_bounds(runner, bounds: tuple):
    """The runner's ``f_alloc_argument`` for programs with ``bounds`` (see :func:`index_bounds`)."""
    import functools  # pylint: disable=import-outside-toplevel

    from .tvm_compat import RPCRunner, alloc_arguments_in_bounds, rpc_alloc_arguments_in_bounds  # pylint: disable=import-outside-toplevel

    if not bounds:
        return None
    fill = rpc_alloc_arguments_in_bounds if isinstance(runner, RPCRunner) else alloc_arguments_in_bounds
    return functools.partial(fill, index_bounds=bounds)


def _repeat_cv(secs: list[float]) -> float:
    mean = sum(secs) / len(secs)
    return (sum((x - mean) ** 2 for x in secs) / len(secs)) ** 0.5 / mean if mean > 0 else 0.0


def _measure_batch(builder, runner, target, fresh: list, max_cv: float | None, dev_type: str = "cpu") -> list[tuple]:
    """Build ``fresh`` ``(candidate, program_key)`` pairs in parallel, then time them one at a time
    on the runner's ``dev_type`` device (``"cpu"`` or ``"cuda"``).

    A program whose repeats vary by more than ``max_cv`` (coefficient of variation) is
    timed once more and the steadier of the two measurements is kept.  A program that
    gathers by index gets in-range indices in its integer arguments (:func:`index_bounds`).

    Returns:
        ``(candidate, program_key, run_secs or None, stage, error)`` per program.
    """
    from .tvm_compat import BuilderInput, RunnerInput  # pylint: disable=import-outside-toplevel

    if not fresh:
        return []
    out, to_run = [], []
    for (c, pk), b in zip(fresh, builder.build([BuilderInput(c.sch.mod, target) for c, _ in fresh])):
        if b.error_msg:
            out.append((c, pk, None, "build", str(b.error_msg)))
        else:
            to_run.append((c, pk, b))

    bounds = {}
    for c, pk in fresh:
        try:
            bounds[pk] = index_bounds(c.sch.mod)
        except Exception:  # noqa: BLE001  an unforeseen construct: TVM's own fill, as before
            bounds[pk] = ()
    default_alloc = runner.f_alloc_argument

    def run(items):
        futures = []
        for key, group in itertools.groupby(items, key=lambda it: bounds[it[1]]):
            # a gather's integer inputs are filled with in-range indices (see index_bounds)
            runner.f_alloc_argument = _use_index_bounds(runner, key) or default_alloc
            try:
                futures += runner.run([RunnerInput(b.artifact_path, dev_type, c.args_info) for c, _, b in group])
            finally:
                runner.f_alloc_argument = default_alloc
        return [f.result() for f in futures]

    timed = {}
    for item, res in zip(to_run, run(to_run)):
        if res.error_msg or res.run_secs is None:
            timed[item[1]] = (None, "run", str(res.error_msg))
        else:
            timed[item[1]] = ([float(x) for x in res.run_secs], "run", "")
    if max_cv is not None:
        noisy = [it for it in to_run if timed[it[1]][0] is not None and _repeat_cv(timed[it[1]][0]) > max_cv]
        for item, res in zip(noisy, run(noisy) if noisy else []):
            if not res.error_msg and res.run_secs is not None:
                again = [float(x) for x in res.run_secs]
                if _repeat_cv(again) < _repeat_cv(timed[item[1]][0]):
                    timed[item[1]] = (again, "run", "")
    for c, pk, b in to_run:
        shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
        secs, stage, error = timed[pk]
        out.append((c, pk, secs, stage, error))
    return out


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
            "programs_per_task": cfg.programs_per_task,
            "evolutionary_fraction": cfg.evolutionary_fraction,
        },
        "collections": runs,
        "networks": networks,
        "tasks": list(entries.values()),
    }


def _mark_phase(manifest: dict, device_dir: Path, task: _Task, random_programs: int) -> None:
    """Record, once and before it measures anything, where a task's evolutionary phase begins."""
    for t in manifest["tasks"]:
        if t["network"] == task.network and t["task_name"] == task.task_name and "random_programs" not in t:
            t["random_programs"] = random_programs
            ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)


def _tune_context(
    task: _Task, target, device: DeviceDescriptor, phase: str, seed: int, store: _Store, workload, population: int
):
    """A TuneContext for one sampling phase, and the phase's cost model (``None`` for random)."""
    from .tvm_compat import ms  # pylint: disable=import-outside-toplevel

    if phase == "random":
        strategy, cost_model = ms.search_strategy.ReplayTrace(max_fail_count=64), None
    else:
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=population, init_min_unmeasured=min(32, population // 2)
        )
        cost_model = ms.cost_model.XGBModel(num_warmup_samples=0, verbose_eval=1 << 30, num_tuning_cores=device.cores)
    ctx = ms.TuneContext(
        task.mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=task.task_name,
        rand_state=seed,
        num_threads=device.cores,
    )
    if cost_model is not None:  # learn from every program of the task measured so far
        records = store.db.get_top_k(workload, 1 << 30)
        cands = [r.as_measure_candidate() for r in records]
        cost_model.update(ctx, cands, [ms.runner.RunnerResult(r.run_secs, None) for r in records])
    return ctx, cost_model


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
        Counts of what this call added (``stopped`` tells whether ``should_stop`` ended it).

    Raises:
        KeyError: an unknown network name.
        DeviceUnavailableError: ``cfg.gpu`` and no CUDA GPU, or no CUDA compiler (nvcc or
            NVRTC), on this host (nothing is written).
    """
    # pylint: disable=import-outside-toplevel
    from dataclasses import replace

    from tqdm import tqdm

    from . import networks as zoo
    from .tvm_compat import (
        EvaluatorConfig,
        LocalBuilder,
        LocalRunner,
        RPCConfig,
        RPCRunner,
        Target,
        TuningRecord,
        load_tensor_intrinsics,
        ms,
        build_for_measurement,
        configure_cuda_compiler,
    )

    for n in cfg.networks:
        zoo.get_network(n)  # fail early on a bad name
    start = time.time()
    if cfg.gpu:
        device = local_gpu(num_cores=cfg.num_cores)  # raises before anything is written
        try:
            configure_cuda_compiler()
        except RuntimeError as err:
            raise DeviceUnavailableError(str(err)) from err
        cfg = replace(cfg, measure=replace(cfg.measure, enable_cpu_cache_flush=False))
    else:
        device = local_cpu(cfg.num_cores, cfg.disable_avx512)
    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    target = Target(device.target)
    device_dir = Path(cfg.out_dir) / device.device_id
    store = _Store(device_dir)
    manifest = ds.read_manifest(device_dir)

    per_network = []
    known = _known_tasks(manifest, device_dir)
    for n in cfg.networks:
        per_network.append(known.get(n) or extract_network_tasks(n, target))
    workloads = {}
    for t in itertools.chain.from_iterable(per_network):  # every task is listed, measured or not
        wl, t.workload_key = store.workload(t.mod)
        workloads[t.workload_key] = wl
        # Structural equality ignores block and buffer names, so tasks of two networks can
        # share one workload whose module names its blocks differently (``lv229_red`` and
        # ``lv239_red``).  Sample on the workload's own module, so that every stored schedule
        # trace replays on the workload it is filed under.
        t.mod = wl.mod
    manifest = _manifest(device, cfg, manifest, list(itertools.chain.from_iterable(per_network)))
    if cfg.max_tasks_per_network is not None:
        per_network = [net_tasks[: cfg.max_tasks_per_network] for net_tasks in per_network]
    # round-robin over networks, so that a collection stopped early covers every network
    tasks = [t for group in itertools.zip_longest(*per_network) for t in group if t is not None]
    manifest["collections"].append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "networks": cfg.networks,
            "measurement": asdict(cfg.measure),
            "seed": cfg.seed,
            # runs without this field seeded each task from the base seed and its workload key only
            "task_seed": "base seed, workload key and the task's programs measured before the visit",
            "runner": "local" if cfg.rpc is None else {"rpc": asdict(cfg.rpc)},
        }
    )
    ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)

    todo = {}
    for t in tasks:
        todo.setdefault(t.workload_key, t)
    total = len(todo) * cfg.programs_per_task
    already = sum(min(store.done.get(k, 0), cfg.programs_per_task) for k in todo)

    tmp = device_dir / ".tmp"
    tmp.mkdir(exist_ok=True)
    old_tmpdir = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp)  # build artifacts of the worker processes, removed at the end
    load_tensor_intrinsics()
    m = cfg.measure
    builder = LocalBuilder(
        max_workers=m.build_workers or os.cpu_count(), timeout_sec=m.build_timeout_s, f_build=build_for_measurement
    )
    evaluator = EvaluatorConfig(
        number=m.number,
        repeat=m.repeat,
        min_repeat_ms=m.min_repeat_ms,
        enable_cpu_cache_flush=m.enable_cpu_cache_flush,
    )
    if cfg.rpc is None:
        runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=evaluator)
    else:
        r = cfg.rpc
        runner = RPCRunner(
            RPCConfig(r.tracker_host, r.tracker_port, r.device_key, session_timeout_sec=r.session_timeout_s),
            evaluator_config=evaluator,
            max_workers=r.parallel_sessions,
        )
    measured = failed = dups = task_errors = 0
    stopped = False
    last_pack = time.time()

    def checkpoint(final: bool) -> None:
        """Write the manifest's counts so far and, when asked to, the packed files."""
        entry = manifest["collections"][-1]
        entry.update({"measured": measured, "failed": failed})
        if final:
            entry.update({"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "stopped_early": stopped})
        ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
        if cfg.pack_every_s is not None:
            ds.pack(device_dir)

    bar = tqdm(total=total, initial=already, disable=not progress, unit="prog", desc=device.device_id, smoothing=0.05)
    try:
        for key, task in todo.items():
            need = cfg.programs_per_task - store.done.get(key, 0)
            if need <= 0:
                continue
            if should_stop is not None and should_stop():
                stopped = True
                break
            bar.set_postfix_str(f"{task.network}:{task.task_name}"[:40])
            wl = workloads[key]
            earlier_failures = store.failed.get(key, 0) if cfg.retry_failed else 0
            seen = (set() if cfg.retry_failed else store.failed_keys.get(key, set())) | (
                store.measured_program_keys(wl) if store.done.get(key) else set()
            )
            n_random = cfg.programs_per_task - round(cfg.programs_per_task * cfg.evolutionary_fraction)
            task_seed = _task_seed(cfg.seed, key, store.done.get(key, 0))
            try:
                exhausted = False
                for phase in ("random", "evolutionary"):
                    if need <= 0 or exhausted or (should_stop is not None and should_stop()):
                        break
                    done = store.done.get(key, 0)
                    if phase == "random":
                        want = min(need, n_random - done)
                        if want <= 0:
                            continue
                    elif not done:  # nothing measured to learn from: the task cannot run here
                        break
                    else:
                        want = need
                        _mark_phase(manifest, device_dir, task, done)
                    ctx, cost_model = _tune_context(
                        task, target, device, phase, task_seed, store, wl, cfg.evolutionary_population
                    )
                    ctx.pre_tuning(
                        max_trials=want * 4,
                        num_trials_per_iter=cfg.batch_size,
                        database=store.db if cost_model is not None else None,
                        cost_model=cost_model,
                    )
                    attempts = 0
                    give_up = max(8, cfg.programs_per_task // 4)  # failures with no success: the task cannot run here
                    while want > 0 and attempts < cfg.programs_per_task * 4:
                        if should_stop is not None and should_stop():
                            break
                        if store.failed.get(key, 0) - earlier_failures >= give_up and not store.done.get(key):
                            break
                        cands = ctx.generate_measure_candidates()
                        if not cands:
                            break
                        attempts += len(cands)
                        fresh = []
                        for c in cands:
                            pk = _program_key(c.sch.mod)
                            if pk in seen:
                                dups += 1
                                continue
                            seen.add(pk)
                            fresh.append((c, pk))
                        if not fresh:  # a whole round of programs already seen: the space is used up
                            exhausted = True
                            break
                        fresh = fresh[:want]
                        results = {}
                        batch = _measure_batch(builder, runner, target, fresh, cfg.measure.max_repeat_cv, dev_type)
                        interrupted = should_stop is not None and should_stop()
                        for c, pk, secs, stage, error in batch:
                            record = TuningRecord(c.sch.trace, wl, secs, target, c.args_info)
                            if secs is None and interrupted:
                                continue  # the stop signal may have killed its worker: measure it again next time
                            if secs is None:
                                store.add_failure(task, pk, stage, error, record)
                                failed += 1
                                continue
                            store.add_record(record, key)
                            measured += 1
                            need -= 1
                            want -= 1
                            bar.update(1)
                            results[id(c)] = ms.runner.RunnerResult(secs, None)
                        outcome = [results.get(id(c), ms.runner.RunnerResult(None, "not measured")) for c in cands]
                        ctx.notify_runner_results(cands, outcome)
                        if cost_model is not None and results:  # only what was timed in this batch
                            timed = [c for c in cands if id(c) in results]
                            cost_model.update(ctx, timed, [results[id(c)] for c in timed])
                    ctx.post_tuning()
            except Exception as err:  # noqa: BLE001  one task's TVM error must not end the collection
                if should_stop is not None and should_stop():
                    raise  # a stop signal that landed inside a TVM callback
                task_errors += 1
                message = f"{type(err).__name__}: {err}"
                manifest["collections"][-1].setdefault("task_errors", []).append(
                    {
                        "network": task.network,
                        "task_name": task.task_name,
                        "workload_key": key,
                        "error": message[-4000:],
                        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    }
                )
                ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
                tqdm.write(
                    f"{task.network}:{task.task_name}: skipped after {message.splitlines()[0][:200]} "
                    "(kept in the manifest; the next collection tries it again)"
                )
            if should_stop is not None and should_stop():
                stopped = True
                break
            if need > 0:  # the design space ran out of distinct programs
                bar.total -= need
                bar.refresh()
            if cfg.pack_every_s is not None and time.time() - last_pack >= cfg.pack_every_s:
                checkpoint(final=False)  # between tasks: no timing is in flight
                last_pack = time.time()
    finally:
        bar.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if old_tmpdir is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_tmpdir
        checkpoint(final=True)
    return CollectSummary(
        device.device_id, device_dir, measured, failed, dups, time.time() - start, stopped, task_errors
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
    load_tensor_intrinsics()
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
        raise ValueError(f"device id {device_id!r} must be a plain folder name")
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
    device_dir: Path, sample: int = 100, seed: int = 0, measure: MeasureConfig | None = None, progress: bool = True
) -> Path:
    """Time a random sample of a device folder's measured programs again, to measure drift.

    Each program is rebuilt from its tuning record and timed with the same protocol
    (no re-timing of noisy repeats), on this host, which must be the device that
    measured the folder.  One JSON line per program is appended to
    ``remeasured.jsonl``: ``workload_key``, ``program_key``, ``run_secs`` (stored,
    seconds), ``again`` (the new repeats, seconds; empty on failure), ``error`` and
    ``time``.  Programs already re-measured are skipped, so it resumes.

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
        EvaluatorConfig,
        LocalBuilder,
        LocalRunner,
        Target,
        build_for_measurement,
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
        raise ValueError(f"this host is {', '.join(devices)}, not {db.device_id}: it cannot re-measure that folder")
    device = devices[db.device_id]
    target = Target(device.target)
    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    if dev_type == "cuda":
        configure_cuda_compiler()
    m = measure or MeasureConfig(**db.manifest.get("measurement", {}))
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
    builder = LocalBuilder(max_workers=os.cpu_count(), timeout_sec=m.build_timeout_s, f_build=build_for_measurement)
    evaluator = EvaluatorConfig(
        number=m.number, repeat=m.repeat, min_repeat_ms=m.min_repeat_ms, enable_cpu_cache_flush=m.enable_cpu_cache_flush
    )
    runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=evaluator)
    bar = tqdm(total=len(picked), disable=not progress, unit="prog", desc="re-measuring")
    for s in range(0, len(picked), 16):
        chunk = picked[s : s + 16]
        fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk) for p, mod, pk in chunk]
        timed = {pk: (secs, err) for _, pk, secs, _, err in _measure_batch(builder, runner, target, fresh, None, dev_type)}
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
    return out


def measure_programs(
    source_dir: Path,
    index,
    out_dir: Path,
    measure: MeasureConfig | None = None,
    disable_avx512: bool = False,
    note: str = "",
    progress: bool = True,
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
        EvaluatorConfig,
        LocalBuilder,
        LocalRunner,
        Target,
        TuningRecord,
        build_for_measurement,
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
        raise IndexError(f"program positions {bad[:5]} are outside the {len(src.programs)} programs of {source_dir}")
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

    load_tensor_intrinsics()
    builder = LocalBuilder(
        max_workers=m.build_workers or os.cpu_count(), timeout_sec=m.build_timeout_s, f_build=build_for_measurement
    )
    evaluator = EvaluatorConfig(
        number=m.number, repeat=m.repeat, min_repeat_ms=m.min_repeat_ms, enable_cpu_cache_flush=m.enable_cpu_cache_flush
    )
    runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=evaluator)
    measured = failed = 0
    bar = tqdm(total=len(todo), disable=not progress, unit="prog", desc=device.device_id)
    try:
        for s in range(0, len(todo), 16):
            chunk = todo[s : s + 16]
            fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk) for p, _, _, mod, pk in chunk]
            timed = {pk: (secs, stage, err) for _, pk, secs, stage, err in _measure_batch(builder, runner, target, fresh, m.max_repeat_cv)}
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
        manifest["collections"][-1].update(
            {"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "measured": measured, "failed": failed}
        )
        ds.write_json_atomic(device_dir / ds.MANIFEST_FILE, manifest)
    return CollectSummary(device.device_id, device_dir, measured, failed, len(index) - len(todo), time.time() - start)
