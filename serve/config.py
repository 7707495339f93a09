"""The service's limits and workers, a plain dataclass: ``cdmpp serve``'s options build it
without importing the web stack."""

from __future__ import annotations

from dataclasses import dataclass


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
