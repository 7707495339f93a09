"""A bounded load test of ``cdmpp serve``: N clients for S seconds against a real server.

``cdmpp bench serve-load`` starts the service on 127.0.0.1 (uvicorn, in this process,
with its worker processes), lets ``clients`` threads post ``POST /predict`` requests
of ``programs`` real measured programs each for ``seconds`` seconds, and prints the
throughput (requests and programs per second) and the p50 / p90 / p99 request
latency.  Run it on a quiet machine: the client threads share the cores with the
server's workers, as they would on one host.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import numpy as np
import uvicorn

from cdmpp import dataset as ds
from cdmpp.serve.app import ServeConfig, create_app
from cdmpp.tvm_compat import program_from_record, save_json


@dataclass
class LoadResult:
    """What one load test measured (latencies in seconds)."""

    clients: int
    seconds: float
    programs_per_request: int
    workers: int
    interval: bool
    requests: int
    errors: int
    requests_per_s: float
    programs_per_s: float
    p50_s: float
    p90_s: float
    p99_s: float


def _programs(dataset: Path, count: int) -> list[dict]:
    """``count`` programs of a device folder as ``{"mod": TVM JSON}`` bodies."""

    db = ds.load_device_dir(ds.device_dirs(Path(dataset))[0])
    out = []
    for p in db.programs[:count]:
        out.append({"mod": save_json(program_from_record(p.record))})
    return out


def run_load_test(
    dataset: Path, clients: int = 8, seconds: float = 60.0, programs: int = 16, workers: int = 1, checkpoint=None,
    interval: bool = True,
) -> LoadResult:
    """Start a server, load it, stop it; see the module docstring."""


    body = {"programs": _programs(dataset, programs), "interval": interval}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app(checkpoint, ServeConfig(workers=workers, timeout_s=max(120.0, seconds)))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    while not srv.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}/predict"
    with httpx.Client(timeout=300) as c:  # warm-up: the worker imports TVM and loads the predictor
        c.post(url, json=body).raise_for_status()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop = time.time() + seconds

    def client() -> None:
        with httpx.Client(timeout=300) as c:
            while time.time() < stop:
                t0 = time.perf_counter()
                r = c.post(url, json=body)
                dt = time.perf_counter() - t0
                with lock:
                    if r.status_code == 200:
                        latencies.append(dt)
                    else:
                        errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t_start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t_start
    srv.should_exit = True
    thread.join(timeout=10)
    lat = np.asarray(latencies) if latencies else np.asarray([float("nan")])
    return LoadResult(
        clients=clients,
        seconds=round(elapsed, 1),
        programs_per_request=programs,
        workers=workers,
        interval=interval,
        requests=len(latencies),
        errors=errors[0],
        requests_per_s=len(latencies) / elapsed,
        programs_per_s=len(latencies) * programs / elapsed,
        p50_s=float(np.percentile(lat, 50)),
        p90_s=float(np.percentile(lat, 90)),
        p99_s=float(np.percentile(lat, 99)),
    )


def format_result(r: LoadResult) -> str:
    """A markdown table row (with header) of one load test."""
    return "\n".join(
        [
            "| clients | seconds | programs/request | workers | intervals | requests | errors | requests/s | programs/s "
            "| p50 ms | p90 ms | p99 ms |",
            "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {r.clients} | {r.seconds} | {r.programs_per_request} | {r.workers} | {'yes' if r.interval else 'no'} | "
            f"{r.requests} | {r.errors} | "
            f"{r.requests_per_s:.2f} | {r.programs_per_s:.1f} | {1e3 * r.p50_s:.0f} | {1e3 * r.p90_s:.0f} | "
            f"{1e3 * r.p99_s:.0f} |",
        ]
    )


def add_arguments(s: argparse.ArgumentParser) -> None:
    """The ``cdmpp bench serve-load`` arguments."""
    s.add_argument("-d", "--dataset", default="datasets/slice", help="device folder (or dataset) the programs come from")
    s.add_argument("--clients", type=int, default=8)
    s.add_argument("--seconds", type=float, default=60.0)
    s.add_argument("--programs", type=int, default=16, help="programs per request")
    s.add_argument("--workers", type=int, default=1, help="the server's worker processes")
    s.add_argument("-c", "--checkpoint", default=None)
    s.add_argument("--no-interval", action="store_true", help="ask for point predictions only")
    s.add_argument("--output", default=None, help="also write the result as JSON here")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench serve-load``."""

    res = run_load_test(
        Path(args.dataset), args.clients, args.seconds, args.programs, args.workers, args.checkpoint,
        not args.no_interval,
    )
    print(format_result(res))
    if args.output:
        Path(args.output).write_text(json.dumps(asdict(res), indent=1), encoding="utf-8")
    return 0
