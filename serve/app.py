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
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cdmpp.errors import InputError
from cdmpp.predictor import LatencyPredictor

from .config import ServeConfig
from .workers import WorkerPool, worker_estimate, worker_predict


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
    view: bool = Field(False, description="runs as a view of its input (a pure reshape), not a kernel: not summed")


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
    workers = WorkerPool(checkpoint, cfg.workers)
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
            cfg.timeout_s, worker_predict, [p.model_dump() for p in req.programs], req.target, req.device, req.interval
        )
        if isinstance(out[0], int):
            raise HTTPException(out[0], out[1])
        (lat, low, high, problems), device_id = out
        return PredictResponse(latency_s=lat, low_s=low, high_s=high, device=device_id, problems=problems)

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
        out = workers.run(cfg.estimate_timeout_s, worker_estimate, req.model_dump(), cfg.max_tasks)
        if isinstance(out, tuple):
            raise HTTPException(out[0], out[1])
        return EstimateResponse(**out)

    @app.get("/networks")
    def networks() -> list[str]:
        from cdmpp.networks import network_names  # noqa: PLC0415  (keeps torch off this module's import)

        return network_names()

    return app
