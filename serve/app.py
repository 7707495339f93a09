"""A small HTTP latency-prediction service (FastAPI).

``POST /predict`` takes a batch of scheduled programs as TVM JSON, never as code:

* ``{"mod": <tvm.ir.save_json of a scheduled IRModule>}``, or
* ``{"workload": <tvm.ir.save_json of the workload IRModule>, "trace": <the schedule
  trace as a MetaSchedule tuning record holds it (``Trace.as_json``)>}``, what a
  JSONDatabase line holds, with the workload inline.

It returns ``{"latency_s": [...]}`` (seconds, one per program).  ``GET /health`` reports
the loaded checkpoint.

Trust model: a request is data.  ``tvm.ir.load_json`` builds TVM objects without
evaluating anything, and parsing, featurizing and predicting run in a worker process:
a crash inside TVM on a crafted JSON costs that request an HTTP 500 that names the
crash, the worker is replaced, and the server goes on.  TVMScript (``{"tvmscript":
...}``) is Python that ``tvm.script.from_source`` evaluates, so it is refused (HTTP
403) unless the app is created with ``execute_tvmscript=True`` (``cdmpp serve
--unsafe-execute-client-tvmscript``), which is allowed on a loopback address only.

Limits (:class:`ServeConfig`): request body size (HTTP 413), programs per request (422),
and a time limit per request (504, and the worker is replaced).  Requests are queued
to a pool of ``workers`` processes (default 1), so the cores are never oversubscribed;
each worker loads the predictor once.  A malformed program gets HTTP 422 with a
message naming the program and the problem.
"""

from __future__ import annotations

import ipaddress
import json
import multiprocessing
import threading
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from cdmpp.errors import CdmppError, InputError, UnknownDeviceError
from cdmpp.estimate import EstimateConfig, best_records, estimate_network, relax_tasks, zoo_tasks
from cdmpp.featurize import UnsupportedProgramError
from cdmpp.predictor import LatencyPredictor


@dataclass
class ServeConfig:
    """Limits and workers of the service.

    Attributes:
        max_body_bytes: largest request body accepted (HTTP 413 above it).
        max_programs: most programs in one request (HTTP 422 above it).
        timeout_s: seconds one ``/predict`` request may take in the worker (HTTP 504 after it).
        estimate_timeout_s: seconds one ``/estimate`` request may take (a zoo network's
            first request also lowers it from PyTorch; each task samples schedules).
        max_tasks: most tuning tasks of one ``/estimate`` network (HTTP 422 above it).
        workers: worker processes that parse, featurize and predict (requests queue for them).
        execute_tvmscript: accept TVMScript programs, which run client code in the
            worker (loopback addresses only; see the module docstring).
    """

    max_body_bytes: int = 16 * 1024 * 1024
    max_programs: int = 1024
    timeout_s: float = 120.0
    estimate_timeout_s: float = 900.0
    max_tasks: int = 512
    workers: int = 1
    execute_tvmscript: bool = False


class Program(BaseModel):
    """One scheduled program: ``mod``, or ``workload`` + ``trace``, or (unsafe servers only) ``tvmscript``."""

    model_config = ConfigDict(extra="forbid")
    mod: str | None = Field(None, description="tvm.ir.save_json of a scheduled IRModule with one PrimFunc")
    workload: str | None = Field(None, description="tvm.ir.save_json of the workload IRModule")
    trace: list[Any] | None = Field(None, description="the schedule trace, as in a MetaSchedule tuning record")
    tvmscript: str | None = Field(None, description="TVMScript; refused unless the server executes client code")

    @model_validator(mode="after")
    def _one_form(self) -> "Program":
        forms = [self.mod is not None, self.workload is not None or self.trace is not None, self.tvmscript is not None]
        if sum(forms) != 1:
            raise InputError("give exactly one of: 'mod'; 'workload' with 'trace'; 'tvmscript'")
        if (self.workload is None) != (self.trace is None):
            raise InputError("'workload' and 'trace' go together")
        return self


class PredictRequest(BaseModel):
    """Body of ``POST /predict``."""

    model_config = ConfigDict(extra="forbid")
    programs: list[Program] = Field(..., min_length=1, description="scheduled programs as TVM JSON")
    device: str | None = Field(None, description="a device id the checkpoint knows (GET /devices)")
    target: dict | None = Field(
        None, description="TVM target as a dict; picks the known device with its mcpu (or CUDA arch) when no device"
    )
    interval: bool = Field(
        True, description="also return each program's 10-90% interval (16 MC-dropout passes per program)"
    )


class PredictResponse(BaseModel):
    """Predicted latency of each program, in seconds, with its 10-90% interval, and the device it is for.

    A program that cannot be featurized has ``null`` latencies and its reason in
    ``problems``; the others are predicted as usual."""

    latency_s: list[float | None]
    low_s: list[float | None] | None = Field(None, description="lower end of each program's 10-90% interval, seconds")
    high_s: list[float | None] | None = Field(None, description="upper end of each program's 10-90% interval, seconds")
    device: str | None = Field(None, description="the device the latencies are for")
    problems: list[str] = Field(default_factory=list,
                                description="per program: empty, or why it has no prediction (its latencies are null)")


class Database(BaseModel):
    """A MetaSchedule JSONDatabase, inline: the parsed lines of its two files."""

    model_config = ConfigDict(extra="forbid")
    workloads: list[Any] = Field(..., description="lines of database_workload.json, each [shash, workload JSON]")
    records: list[Any] = Field(
        ..., description="lines of database_tuning_record.json, each [workload index, [trace, run_secs, target, args]]"
    )


class EstimateRequest(BaseModel):
    """Body of ``POST /estimate``: one network (a zoo name or a Relax IRModule as TVM JSON) on one device."""

    model_config = ConfigDict(extra="forbid")
    network: str | None = Field(None, description="a zoo network name (cdmpp networks), e.g. resnet_50-b1")
    relax: str | None = Field(None, description="tvm.ir.save_json of a Relax IRModule")
    device: str | None = Field(None, description="a device id the checkpoint knows (GET /devices)")
    target: dict | None = Field(None, description="TVM target as a dict; picks the device when no device is given")
    database: Database | None = Field(None, description="tuning records: each task's fastest record is its schedule")
    samples: int = Field(32, ge=1, le=256, description="schedules sampled per task without a database record")

    @model_validator(mode="after")
    def _one_network(self) -> "EstimateRequest":
        if (self.network is None) == (self.relax is None):
            raise InputError("give exactly one of 'network' (a zoo name) and 'relax' (a Relax IRModule as TVM JSON)")
        return self


class TaskEstimateOut(BaseModel):
    """One task of the network: its weight, where its schedule came from, and its predicted latency (seconds)."""

    task: str
    weight: int
    workload_key: str
    source: str = Field(..., description="'database' (the fastest measured record) or 'sampled' (best-predicted)")
    source_detail: str
    latency_s: float
    low_s: float
    high_s: float
    measured_s: float | None = Field(None, description="the database record's measured latency, seconds")


class EstimateResponse(BaseModel):
    """A whole network on one device: per task, and ``sum(weight * latency)`` with its interval (seconds)."""

    network: str
    device: str | None
    tasks: list[TaskEstimateOut]
    total_s: float
    low_s: float
    high_s: float
    measured_total_s: float | None = Field(None, description="sum(weight * measured) when every task has a record")


class DeviceInfo(BaseModel):
    """A device the checkpoint knows."""

    device_id: str
    kind: str
    model: str
    cores: int
    isa: str
    target: dict


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


def _worker_init(checkpoint: str | None) -> None:
    global _WORKER_PREDICTOR  # pylint: disable=global-statement  one predictor per worker process

    _WORKER_PREDICTOR = LatencyPredictor.load(checkpoint)


def _worker_predict(
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
            dev = _WORKER_PREDICTOR.device_of(device, target)
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
    dev_id = dev.device_id if dev is not None else None
    try:
        out = _WORKER_PREDICTOR.predict_each(mods, target, dev_id, [f"programs[{i}]" for i in range(len(mods))],
                                             intervals=interval)
    except (UnsupportedProgramError, ValueError) as err:
        return 422, str(err)

    def values(a):
        return [float(v) if np.isfinite(v) else None for v in a]

    problems = [f"programs[{i}]: {p}" if p else "" for i, p in enumerate(out.problems)]
    if not interval:
        return (values(out.latency_s), None, None, problems), dev_id
    return (values(out.latency_s), values(out.low_s), values(out.high_s), problems), dev_id


_WORKER_TASKS: dict[str, list] = {}  # zoo network tasks per (network, target), extracted once per worker


def _worker_estimate(req: dict, max_tasks: int) -> dict | tuple[int, str]:
    """In the worker: a whole-network estimate (see :mod:`cdmpp.estimate`), or ``(status, message)``."""

    from cdmpp.tvm_compat import Target, load_json  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    pred = _WORKER_PREDICTOR
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dev = pred.device_of(req.get("device"), req.get("target"))
        target = Target(req["target"]) if req.get("target") is not None else Target(dev.target)
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
            pred, tasks, dev.device_id if dev is not None else None, target, database,
            EstimateConfig(samples=int(req.get("samples", 32)), max_tasks=max_tasks),
        )
    except CdmppError as err:
        return 422, str(err).strip("'\"")
    out = est.to_json()
    out["network"] = req.get("network") or "relax module"
    return out


class _Workers:
    """A process pool that is replaced when a worker dies or a request runs out of time."""

    def __init__(self, checkpoint: str | None, workers: int):

        self._args = (checkpoint, workers)
        self._ctx = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._pool = self._new()

    def _new(self) -> ProcessPoolExecutor:
        checkpoint, workers = self._args
        return ProcessPoolExecutor(workers, mp_context=self._ctx, initializer=_worker_init, initargs=(checkpoint,))

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:
                for proc in list(getattr(broken, "_processes", {}).values()):
                    proc.kill()
                broken.shutdown(wait=False, cancel_futures=True)
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
        pool = self._pool
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(grace_s)
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def create_app(checkpoint: str | None = None, config: ServeConfig | None = None):
    """The FastAPI application serving one checkpoint (default: the shipped one).

    Raises:
        CheckpointError: a missing or corrupt checkpoint (checked here, before serving).
    """
    from fastapi import FastAPI, HTTPException, Request  # noqa: PLC0415  (keeps fastapi off this module's import)
    from fastapi.responses import JSONResponse  # noqa: PLC0415  (keeps fastapi off this module's import)


    cfg = config or ServeConfig()
    loaded = LatencyPredictor.load(checkpoint)  # fail before serving on a bad checkpoint
    meta = loaded.metadata
    known = [loaded.descriptor(d) for d in loaded.devices]
    workers = _Workers(checkpoint, cfg.workers)
    app = FastAPI(title="cdmpp latency prediction")
    app.state.workers = workers

    @app.middleware("http")
    async def limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > cfg.max_body_bytes):
            return JSONResponse({"detail": f"the body is larger than {cfg.max_body_bytes} bytes"}, status_code=413)
        return await call_next(request)

    @app.on_event("shutdown")
    def stop_workers() -> None:
        workers.shutdown()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok", "devices": [d.device_id for d in known], "holdout": meta.get("holdout")}

    @app.get("/devices", response_model=list[DeviceInfo])
    def devices() -> list[DeviceInfo]:
        return [
            DeviceInfo(device_id=d.device_id, kind=d.kind, model=d.model, cores=d.cores, isa=d.isa, target=d.target)
            for d in known
        ]

    @app.post("/predict", response_model=PredictResponse)
    def predict(req: PredictRequest) -> PredictResponse:
        if len(req.programs) > cfg.max_programs:
            raise HTTPException(422, f"programs: {len(req.programs)} programs, more than the limit of {cfg.max_programs}")
        if any(p.tvmscript is not None for p in req.programs) and not cfg.execute_tvmscript:
            raise HTTPException(403, "programs: TVMScript is refused: it is code, and this server does not run "
                                     "client code; send {'mod': tvm.ir.save_json(mod)} instead")
        if req.device is not None and req.device not in {d.device_id for d in known}:
            raise HTTPException(
                422, f"device: unknown device {req.device!r}; this server knows {', '.join(d.device_id for d in known)}"
            )
        out = workers.run(
            cfg.timeout_s, _worker_predict, [p.model_dump() for p in req.programs], req.target, req.device, req.interval
        )
        if isinstance(out[0], int):
            raise HTTPException(out[0], out[1])
        (lat, low, high, problems), dev = out
        return PredictResponse(latency_s=lat, low_s=low, high_s=high, device=dev, problems=problems)

    @app.post("/estimate", response_model=EstimateResponse)
    def estimate(req: EstimateRequest) -> EstimateResponse:
        if req.device is not None and req.device not in {d.device_id for d in known}:
            raise HTTPException(
                422, f"device: unknown device {req.device!r}; this server knows {', '.join(d.device_id for d in known)}"
            )
        if req.network is not None:
            from cdmpp.networks import network_names  # noqa: PLC0415  (keeps torch off this module's import)

            if req.network not in network_names():
                raise HTTPException(422, f"network: unknown zoo network {req.network!r}; GET /networks lists them")
        out = workers.run(cfg.estimate_timeout_s, _worker_estimate, req.model_dump(), cfg.max_tasks)
        if isinstance(out, tuple):
            raise HTTPException(out[0], out[1])
        return EstimateResponse(**out)

    @app.get("/networks")
    def networks() -> list[str]:
        from cdmpp.networks import network_names  # noqa: PLC0415  (keeps torch off this module's import)

        return network_names()

    return app
