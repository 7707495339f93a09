"""The timing protocol: the inputs, MetaSchedule's runner with adaptive repeats, and a batch's build, time and store steps."""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import itertools
import os
import shutil
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from cdmpp.collect.quiet import QuietGuard

from ..device import DeviceDescriptor
from .config import CollectConfig, MeasureConfig, QuietConfig
from .machine import PooledBuilder, StageClock, log_note

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
    from ..tvm_compat import PrimFunc  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

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


def _runner_probe(stage_file: str, stage: str, seconds: float) -> None:
    """In a runner worker: append one stage time to the collector's probe file."""
    with open(stage_file, "a", encoding="utf-8") as f:
        f.write(f"{stage}\t{seconds:.6f}\n")


def _probed_alloc(device, args_info, alloc_repeat, inner=None, stage_file: str = ""):
    """``f_alloc_argument`` that times the allocation (in the runner worker)."""
    if inner is None:
        from ..tvm_compat import default_alloc_argument as inner  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)
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


def run_evaluator(m: MeasureConfig):
    """The runner's ``f_run_evaluator`` of the measuring protocol ``m`` (``None``:
    MetaSchedule's default, every repeat)."""
    if m.adaptive_repeats is None:
        return None
    return functools.partial(adaptive_run_evaluator, first=m.adaptive_repeats, min_s=m.adaptive_min_s,
                             max_spread=m.adaptive_max_spread)


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
    from ..tvm_compat import run_evaluator_common  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

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
    from ..tvm_compat import run_evaluator_common  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

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

    from ..tvm_compat import (  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)
        RPCRunner,
        alloc_arguments_in_bounds,
        rpc_alloc_arguments_in_bounds,
    )

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


def _repeat_cv(secs: list[float]) -> float:
    mean = sum(secs) / len(secs)
    return (sum((x - mean) ** 2 for x in secs) / len(secs)) ** 0.5 / mean if mean > 0 else 0.0


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
    warm_runner: object | None = None  # times the warm protocol (MeasureConfig.warm); None: cold only
    warm_secs: dict = field(default_factory=dict)  # program key -> warm run_secs, until the record is written

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


def _run_batch(bench: _Bench, items: list, bounds: dict, warm: bool = False) -> list:
    """Time built ``(candidate, program_key, build_result)`` items one at a time; runner results in order.

    ``warm``: with the warm protocol's runner, its whole wall time counted as the
    ``"warm timing"`` stage (no stage probes)."""
    from ..tvm_compat import RunnerInput  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    futures = []
    t0 = time.perf_counter()
    probe = str(bench.probe_file) if bench.probe_file is not None and not warm else None
    for key, group in itertools.groupby(items, key=lambda it: bounds[it[1]]):
        with _runner_functions(bench.warm_runner if warm else bench.runner, key, probe) as runner:
            futures += runner.run([RunnerInput(b.artifact_path, bench.dev_type, c.args_info) for c, _, b in group])
    results = [f.result() for f in futures]
    if warm:
        bench.clock.add("warm timing", time.perf_counter() - t0)
        return results
    inside = bench.read_probe()
    bench.clock.add("runner start-up", time.perf_counter() - t0 - inside)
    return results


def _timed_quietly(bench: _Bench, items: list, bounds: dict, warm: bool = False) -> list:
    """:func:`_run_batch` on a quiet machine (:meth:`QuietGuard.run_quietly`)."""
    if bench.guard is None or not items:
        return _run_batch(bench, items, bounds, warm)
    return bench.guard.run_quietly(lambda: _run_batch(bench, items, bounds, warm), log_note,
                                   lambda: bench.clock.stage("quiet-machine wait"))


@dataclass
class _Submitted:
    """A batch whose builds are queued (:func:`submit_batch`)."""

    fresh: list
    builds: list  # concurrent futures of BuilderResults, or the BuilderResults themselves
    bounds: dict


def submit_batch(bench: _Bench, fresh: list) -> _Submitted:
    """Queue the builds of ``fresh`` ``(candidate, program_key)`` pairs (on the worker
    processes; a builder without ``submit`` builds them here and now)."""
    from ..tvm_compat import BuilderInput  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

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
        except Exception:
            bounds[pk] = ()
    return _Submitted(fresh, builds, bounds)


def finish_batch(bench: _Bench, batch: _Submitted) -> list[tuple]:
    """Wait for a submitted batch's builds, then time its programs one at a time with the
    build workers paused (:meth:`PooledBuilder.paused`).

    A program whose repeats vary by more than ``bench.max_cv`` (coefficient of
    variation) is timed once more and the steadier of the two measurements is kept.  A
    program that gathers by index gets in-range indices in its integer arguments
    (:func:`index_bounds`).  With a guard, every timing batch runs on a quiet machine.
    With a warm runner, each program timed cold is then timed warm
    (:attr:`MeasureConfig.warm`); its repeats wait in ``bench.warm_secs`` under its
    program key until the caller writes its record.

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
        if bench.warm_runner is not None:
            _time_warm(bench, [it for it in to_run if timed[it[1]][0] is not None], bounds)
    for c, pk, b in to_run:
        shutil.rmtree(os.path.dirname(str(b.artifact_path)), ignore_errors=True)
        secs, stage, error = timed[pk]
        out.append((c, pk, secs, stage, error))
    return out


def _time_warm(bench: _Bench, items: list, bounds: dict) -> None:
    """Time built items with the warm protocol; keep each success's repeats in ``bench.warm_secs``
    (a program that fails warm keeps its cold record only)."""
    for (_, pk, _), res in zip(items, _timed_quietly(bench, items, bounds, warm=True) if items else []):
        if not res.error_msg and res.run_secs is not None:
            bench.warm_secs[pk] = [float(x) for x in res.run_secs]


def measure_batch(bench: _Bench, fresh: list) -> list[tuple]:
    """Build ``fresh`` ``(candidate, program_key)`` pairs in parallel, then time them one at
    a time (:func:`submit_batch`, then :func:`finish_batch`).

    Returns:
        ``(candidate, program_key, run_secs or None, stage, error)`` per program.
    """
    return finish_batch(bench, submit_batch(bench, fresh))


def local_bench(m: MeasureConfig, target, dev_type: str, quiet: QuietConfig | None, probe_file: Path | None = None,
                 clock: StageClock | None = None, tmp_dir: Path | None = None) -> _Bench:
    """A builder on all cores (its artifacts in ``tmp_dir``; ``None``: the system's temporary
    folder), a ``LocalRunner`` (one program at a time) and, unless ``quiet`` is ``None``, the
    quiet-machine guard."""
    from ..tvm_compat import LocalRunner, build_for_measurement, export_shared_library  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    # linked into a shared library by the build workers, in parallel, not by the one runner
    builder = PooledBuilder(m.build_workers or os.cpu_count() or 1, m.build_timeout_s, build_for_measurement,
                            f_export=export_shared_library if dev_type == "cpu" else None, tmp_dir=tmp_dir)
    runner = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=m.evaluator_config(),
                         f_run_evaluator=run_evaluator(m))
    warm = None
    if m.warm and dev_type == "cpu":  # a GPU has no CPU cache flush to leave out
        warm = LocalRunner(timeout_sec=m.run_timeout_s, evaluator_config=m.evaluator_config(warm=True))
    guard = QuietGuard(quiet) if quiet is not None else None
    return _Bench(builder, runner, target, dev_type, m.max_repeat_cv, clock or StageClock(), guard, probe_file, warm)


def make_bench(cfg: CollectConfig, device: DeviceDescriptor, target, clock: StageClock, tmp: Path) -> _Bench:
    """The collection's builder and runner (local, or through an RPC tracker) and its guard."""
    from ..tvm_compat import RPCConfig, RPCRunner  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    bench = local_bench(cfg.measure, target, dev_type, cfg.quiet, tmp / "runner-stages.tsv", clock, tmp)
    if cfg.rpc is not None:  # RPC boards are timed elsewhere: no guard on this host
        m, r = cfg.measure, cfg.rpc
        bench.runner = RPCRunner(
            RPCConfig(r.tracker_host, r.tracker_port, r.device_key, session_timeout_sec=r.session_timeout_s),
            evaluator_config=m.evaluator_config(),
            max_workers=r.parallel_sessions,
        )
        bench.builder.f_export = None  # a tar archive, linked on the board by its own toolchain
        bench.guard = None
        bench.warm_runner = None  # the warm protocol runs on the local runner only
    return bench
