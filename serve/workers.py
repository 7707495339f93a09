"""The HTTP service's worker processes: each loads the predictor once, parses requests (data, never code) and predicts or estimates; a pool that replaces a worker that crashes or runs out of time."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from cdmpp.errors import CdmppError, InputError, UnknownDeviceError
from cdmpp.estimate import EstimateConfig, SampledSchedules, best_records, estimate_network, relax_tasks, zoo_tasks
from cdmpp.featurize import UnsupportedProgramError
from cdmpp.predictor import LatencyPredictor


class ProgramError(InputError):
    """A program that cannot be read or featurized (HTTP 422)."""


def parse_program(program: dict):
    """A scheduled program from one :class:`Program` (as a dict), without evaluating any code
    except for ``tvmscript``, which callers must have allowed: an IRModule, or for the
    ``workload`` + ``trace`` form the ``Schedule`` that replayed the trace (so that a
    checkpoint trained with trace tokens reads it).

    Raises:
        ProgramError: malformed JSON, a JSON that is no IRModule, or a trace that does not
            replay on its workload.
    """
    from cdmpp.tvm_compat import IRModule, Schedule, apply_trace_json, load_json  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if program.get("tvmscript") is not None:
        from tvm.script import from_source  # noqa: PLC0415  (keeps tvm off this module's import)

        try:
            return from_source(program["tvmscript"])
        except Exception as err:  # noqa: BLE001  the TVMScript parser raises several error types
            raise ProgramError(f"malformed TVMScript: {str(err).strip()[:300]}") from err
    text = program.get("mod") if program.get("mod") is not None else program.get("workload")
    try:
        mod = load_json(text)
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise ProgramError(f"malformed TVM JSON: {str(err).strip()[:300]}") from err
    if not isinstance(mod, IRModule):
        raise ProgramError(f"the JSON holds a {type(mod).__name__}, not an IRModule")
    if program.get("trace") is None:
        return mod
    try:
        sch = Schedule(mod)
        apply_trace_json(program["trace"], sch)
    except Exception as err:  # noqa: BLE001
        raise ProgramError(f"the trace does not replay on the workload: {str(err).strip()[:300]}") from err
    return sch


_WORKER_PREDICTOR = None


def worker_init(checkpoint: str | None, pids=None) -> None:
    """In a new worker process: load the predictor (once per worker) and report this
    process's id on ``pids`` (a queue of the pool, so that it can stop its workers)."""
    global _WORKER_PREDICTOR  # pylint: disable=global-statement  one predictor per worker process

    if pids is not None:
        pids.put(os.getpid())
    _WORKER_PREDICTOR = LatencyPredictor.load(checkpoint)


def worker_predict(
    programs: list[dict], target: dict | None, device: str | None = None, interval: bool = True
) -> tuple[tuple, str | None] | tuple[int, str]:
    """In the worker: parse, then predict through the predictor's core
    (:meth:`LatencyPredictor.predict_each`); ``((latencies, lows, highs, problems), device
    id)``, a program that cannot be featurized with ``None`` latencies and its reason, or
    ``(status, message)`` for a bad request."""

    from cdmpp.tvm_compat import Target  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            descriptor = _WORKER_PREDICTOR.device_of(device, target)
    except UnknownDeviceError as err:
        return 422, f"device: {err}"
    except Exception as err:  # noqa: BLE001  a malformed target dict raises TVM's own error types
        return 422, f"target: not a TVM target: {str(err).strip()[:300]}"
    if target is not None:
        try:
            target = Target(target)
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            return 422, f"target: not a TVM target: {str(err).strip()[:300]}"
    mods = []
    for i, p in enumerate(programs):
        try:
            mods.append(parse_program(p))
        except ProgramError as err:
            return 422, f"programs[{i}]: {err}"
    device_id = descriptor.device_id if descriptor is not None else None
    try:
        out = _WORKER_PREDICTOR.predict_each(mods, target, device_id, [f"programs[{i}]" for i in range(len(mods))],
                                             intervals=interval)
    except (UnsupportedProgramError, ValueError) as err:
        return 422, str(err)

    def values(a):
        return [float(v) if np.isfinite(v) else None for v in a]

    problems = [f"programs[{i}]: {p}" if p else "" for i, p in enumerate(out.problems)]
    if not interval:
        return (values(out.latency_s), None, None, problems), device_id
    return (values(out.latency_s), values(out.low_s), values(out.high_s), problems), device_id


_WORKER_TASKS: dict[str, list] = {}  # zoo network tasks per (network, target), extracted once per worker
_WORKER_SAMPLED = SampledSchedules()  # each task's chosen sampled schedule, featurized once per worker


def worker_estimate(req: dict, max_tasks: int) -> dict | tuple[int, str]:
    """In the worker: a whole-network estimate (see :mod:`cdmpp.estimate`), or ``(status, message)``."""

    from cdmpp.tvm_compat import Target, load_json  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    pred = _WORKER_PREDICTOR
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            descriptor = pred.device_of(req.get("device"), req.get("target"))
        target = Target(req["target"]) if req.get("target") is not None else Target(descriptor.target)
    except UnknownDeviceError as err:
        return 422, f"device: {err}"
    except Exception as err:  # noqa: BLE001  a malformed target dict raises TVM's own error types
        return 422, f"target: not a TVM target: {str(err).strip()[:300]}"
    try:
        if req.get("network") is not None:
            key = f"{req['network']}|{json.dumps(target.export(), sort_keys=True, default=str)}"
            if key not in _WORKER_TASKS:
                _WORKER_TASKS[key] = zoo_tasks(req["network"], target)
            tasks = _WORKER_TASKS[key]
        else:
            try:
                mod = load_json(req["relax"])
            except Exception as err:  # noqa: BLE001  TVM raises its own error types
                return 422, f"relax: malformed TVM JSON: {str(err).strip()[:300]}"
            tasks = relax_tasks(mod, target)
        db = req.get("database")
        database = best_records(db["workloads"], db["records"]) if db else None
        est = estimate_network(
            pred, tasks, descriptor.device_id if descriptor is not None else None, target, database,
            EstimateConfig(samples=int(req.get("samples", 32)), max_tasks=max_tasks), _WORKER_SAMPLED,
        )
    except CdmppError as err:
        return 422, str(err).strip("'\"")
    out = est.to_json()
    out["network"] = req.get("network") or "relax module"
    return out


class WorkerPool:
    """A process pool that is replaced when a worker dies or a request runs out of time.

    Each worker reports its process id when it starts, so that the pool stops exactly its
    own workers (with ``psutil``), not through the executor's private state.
    """

    def __init__(self, checkpoint: str | None, workers: int):
        self._args = (checkpoint, workers)
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._pids = self._ctx.SimpleQueue()
        self._known: set[int] = set()
        self._pool = self._new()

    def _new(self) -> ProcessPoolExecutor:
        checkpoint, workers = self._args
        return ProcessPoolExecutor(workers, mp_context=self._ctx, initializer=worker_init,
                                   initargs=(checkpoint, self._pids))

    def _processes(self) -> list:
        """The ``psutil.Process`` of every worker started so far that is still running."""
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        while not self._pids.empty():
            self._known.add(self._pids.get())
        out = []
        for pid in sorted(self._known):
            try:
                out.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                self._known.discard(pid)
        return out

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                for proc in self._processes():
                    proc.kill()
                broken.shutdown(wait=False, cancel_futures=True)
                self._known.clear()
                self._pool = self._new()

    def run(self, timeout_s: float, fn, *args):
        """``fn(*args)`` in a worker; ``(status, message)`` when it crashed the worker or ran out of time."""
        pool = self._pool
        try:
            return pool.submit(fn, *args).result(timeout=timeout_s)
        except FutureTimeout:
            self._replace(pool)
            return 504, f"the request took longer than {timeout_s:g} s"
        except BrokenProcessPool:
            self._replace(pool)
            return 500, "the worker process crashed on this request (a TVM crash on the input); it was replaced"

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop the pool and its worker processes: ask them to exit, then terminate (and,
        after ``grace_s`` seconds, kill) any still running, so that no worker holding a
        loaded checkpoint outlives the server."""
        import psutil  # noqa: PLC0415  (keeps psutil off this module's import)

        procs = self._processes()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            try:
                proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=1.0)
