"""Whole-network latency estimates: one schedule per task, its predicted latency, summed by task weight.

A network (a zoo name, or any Relax IRModule) is split into MetaSchedule tuning tasks
(``ms.relax_integration.extract_tasks``): each task is one fused PrimFunc, and its task
weight is how many times the network calls it.  For each task the estimate picks a
schedule and predicts its latency on one device:

* with a tuning database (MetaSchedule JSONDatabase lines) that holds the task's
  workload, the record with the lowest measured latency (``source="database"``), as
  ``ms.relax_integration.compile_relax`` would compile it;
* otherwise the best-predicted of ``samples`` schedules sampled uniformly from the
  task's design space (``source="sampled"``): an estimate of a lightly tuned network,
  not of a tuned one.

The network's estimate is ``sum(weight * latency)`` over the tasks, with the 10-90%
interval summed the same way.  Summing kernels leaves out what runs between them (the
Relax VM's own work, memory planning); TenSet reports TVM's own summed estimate 25-31%
above measured end-to-end latency.  A training simulator in the style of dPRO adds the
per-task latencies along its own timeline instead.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .collect import sample_schedules
from .dataset import database_files
from .errors import InputError
from .predictions import FeaturizedProgram
from .records import iter_json_lines, parse_record
from .tasks import Task, relax_tasks, zoo_tasks  # noqa: F401  (relax_tasks, zoo_tasks: re-exported)

if TYPE_CHECKING:  # annotations only: TVM loads when a function runs

    from .predictor import LatencyPredictor, TargetLike

log = logging.getLogger(__name__)


@dataclass
class EstimateConfig:
    """How tasks without a database record get a schedule.

    Attributes:
        samples: schedules sampled per such task; the best-predicted one is used.
        seed: seed of the sampling (the same request gives the same answer).
        max_tasks: most tasks one network may have (a guard for servers).
    """

    samples: int = 32
    seed: int = 0
    max_tasks: int = 512

    def __post_init__(self):
        if not 1 <= self.samples <= 4096:
            raise InputError(f"samples must be in [1, 4096], got {self.samples}")
        if self.max_tasks < 1:
            raise InputError(f"max_tasks must be >= 1, got {self.max_tasks}")


@dataclass
class TaskEstimate:
    """The estimate of one task.

    Attributes:
        task: task name.  weight: task weight.
        workload_key: the workload's structural hash.
        source: ``"database"`` or ``"sampled"``.
        source_detail: which record or how many samples.
        latency_s, low_s, high_s: predicted latency of one call and its 10-90% interval, seconds.
        measured_s: the database record's measured latency (median of its repeats), seconds, if any.
        warm_s: predicted latency of one call inside the network (the warm protocol: inputs
            and weights in the caches, as the kernel before left them), seconds, when the
            checkpoint learned the device's warm protocol.
        measured_warm_s: the database record's latency timed warm, seconds, if it was.
        view: the deployed network runs the task as a view of its input, not as a kernel
            (a pure reshape, :func:`cdmpp.tvm_compat.runs_as_view`); the network's totals
            leave it out, and its latencies are the program's alone.
    """

    task: str
    weight: int
    workload_key: str
    source: str
    source_detail: str
    latency_s: float
    low_s: float
    high_s: float
    measured_s: float | None = None
    warm_s: float | None = None
    measured_warm_s: float | None = None
    view: bool = False


@dataclass
class NetworkEstimate:
    """A whole network's estimate on one device.

    Attributes:
        device: the device id the latencies are for.
        tasks: one :class:`TaskEstimate` per task.
        total_s, low_s, high_s: ``sum(weight * latency)`` over the tasks that run as kernels
            (not :attr:`TaskEstimate.view`) and its interval, seconds.  Every sum below
            leaves the view tasks out too.
        measured_total_s: ``sum(weight * measured_s)`` when every task has a database
            record, else ``None``.
        warm_total_s: the in-network estimate, ``sum(weight * warm_s)``: each kernel as it
            runs inside the network, its inputs in the caches; ``None`` when the checkpoint
            did not learn the device's warm protocol (``total_s`` sums cold kernels, each
            timed alone after a cache flush).
        warm_learned: whether the checkpoint learned the device's warm protocol (its
            ``"warm"`` device-table row), which gives ``warm_s`` and ``warm_total_s``.
        measured_warm_total_s: ``sum(weight * measured_warm_s)`` when every task's record
            was timed warm, else ``None``.
        between_kernels_s: the Relax VM's time between the kernels of one inference: the
            device's per-inference cost plus its per-call cost times the calls (``sum(weight)``),
            seconds, measured when the device's folder was collected
            (:func:`cdmpp.collect.vm_call.measure_vm_call`); ``None`` when the checkpoint's
            device descriptor has none.
    """

    device: str | None
    tasks: list[TaskEstimate] = field(default_factory=list)
    total_s: float = 0.0
    low_s: float = 0.0
    high_s: float = 0.0
    measured_total_s: float | None = None
    warm_total_s: float | None = None
    warm_learned: bool = False
    measured_warm_total_s: float | None = None
    between_kernels_s: float | None = None

    @property
    def network_s(self) -> float:
        """The in-network estimate of one inference, seconds: the warm total where the
        checkpoint learned the device's warm protocol (else the cold total), plus the time
        between kernels where the device's was measured."""
        kernels = self.warm_total_s if self.warm_total_s is not None else self.total_s
        return kernels + (self.between_kernels_s or 0.0)

    def to_json(self) -> dict:
        """A JSON-able dict (what ``POST /estimate`` returns), with :attr:`network_s`."""
        return {**asdict(self), "network_s": self.network_s}


@dataclass
class BestRecord:
    """The fastest measured tuning record of one workload.

    Attributes:
        record: the MetaSchedule ``TuningRecord``.
        measured_s: its measured latency (median of its repeats), seconds.
        records: how many measured records of the workload were compared.
        warm_s: the same program's latency under the warm protocol (no cache flush), seconds,
            where it was timed so.
    """

    record: object
    measured_s: float
    records: int
    warm_s: float | None = None


def keep_fastest(best: dict, key, mod, record, measured_s: float, warm_s: float | None = None) -> None:
    """Fold one measured record into ``best[key] = (workload IRModule, BestRecord)``."""
    cur = best.get(key)
    if cur is None:
        best[key] = (mod, BestRecord(record, measured_s, 1, warm_s))
    elif measured_s < cur[1].measured_s:
        best[key] = (mod, BestRecord(record, measured_s, cur[1].records + 1, warm_s))
    else:
        cur[1].records += 1


def best_records(workload_lines: list, record_lines: list) -> dict[str, tuple[object, BestRecord]]:
    """The lowest-latency measured record of each workload in JSONDatabase lines.

    Args:
        workload_lines: parsed lines of ``database_workload.json`` (``[shash, mod JSON]``).
        record_lines: parsed lines of ``database_tuning_record.json``
            (``[workload index, [trace, run_secs, target, args_info]]``).

    Returns:
        ``{structural hash: (workload IRModule, best record)}``; workloads without a
        successful measurement are left out.

    Raises:
        InputError: a malformed line (the message names it).
    """
    from .tvm_compat import Workload, structural_hash  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    workloads = []
    for i, obj in enumerate(workload_lines):
        try:
            workloads.append(Workload.from_json(obj))
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            raise InputError(f"database.workloads[{i}]: not a MetaSchedule workload: {str(err).strip()[:200]}") from err
    out: dict[str, tuple[object, BestRecord]] = {}
    for i, obj in enumerate(record_lines):
        widx, rec, measured = parse_record(obj, workloads, f"database.records[{i}]")
        if measured is None:
            continue  # failed builds and runs carry 1e10
        mod = workloads[widx].mod
        keep_fastest(out, str(structural_hash(mod)), mod, rec, measured)
    return out


def work_dir_best(work_dir: Path) -> dict[str, tuple[object, BestRecord]]:
    """:func:`best_records` of a MetaSchedule JSONDatabase folder (``cdmpp tune``'s work
    dir; each file plain or gzipped).

    Raises:
        InputError: the folder holds no ``database_workload.json`` and
            ``database_tuning_record.json``, or a malformed line (named).
    """
    wl, rec = database_files(Path(work_dir))
    return best_records([o for _, o in iter_json_lines(wl)], [o for _, o in iter_json_lines(rec)])


def _scheduled(mod, trace):
    from .tvm_compat import Schedule  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    sch = Schedule(mod)
    trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


class SampledSchedules:
    """The best-predicted sampled schedule of each task an estimate has seen, featurized,
    to reuse across estimates in one process (the HTTP service's worker keeps one).

    Keyed by the task's workload (structural hash), the device, the target, the sample
    count and seed; the values are :class:`cdmpp.predictor.FeaturizedProgram`, so a later
    estimate of a task predicts its interval without sampling or featurizing it again.
    ``max_entries`` bounds it (the oldest entry goes first).
    """

    def __init__(self, max_entries: int = 4096):
        self.max_entries = max_entries
        self._entries: dict[tuple, tuple[FeaturizedProgram, int]] = {}
        self.hits = self.misses = 0

    def get(self, key: tuple) -> tuple[FeaturizedProgram, int] | None:
        found = self._entries.get(key)
        self.hits, self.misses = self.hits + (found is not None), self.misses + (found is None)
        return found

    def put(self, key: tuple, program: FeaturizedProgram, sampled: int) -> None:
        if len(self._entries) >= self.max_entries:
            self._entries.pop(next(iter(self._entries)))
        self._entries[key] = (program, sampled)


def estimate_network(
    predictor: LatencyPredictor, tasks: list[Task], device: str | None = None, target: TargetLike | None = None,
    database: dict | None = None,
    cfg: EstimateConfig | None = None,
    sampled: SampledSchedules | None = None,
) -> NetworkEstimate:
    """Estimate a network's latency on one device from its tasks.

    Args:
        predictor: a :class:`cdmpp.LatencyPredictor`.
        tasks: the network's tasks (:func:`zoo_tasks`, :func:`relax_tasks`).
        device: a device id the checkpoint knows; ``None`` follows
            :meth:`~cdmpp.LatencyPredictor.resolve_device` with ``target``.
        target: a TVM target (dict or ``Target``) for sampling and featurizing;
            default the device's.
        database: ``{structural hash: (workload, best record)}`` from :func:`best_records`.
        cfg: samples per task, seed and the task limit.
        sampled: a :class:`SampledSchedules` that keeps each task's chosen sampled schedule
            for later estimates in this process (``None``: sample every time).

    Returns:
        A :class:`NetworkEstimate`; latencies in seconds.

    Raises:
        UnknownDeviceError: an unknown device.  InputError: more tasks than
            ``cfg.max_tasks``, or a task none of whose schedules can be featurized.
    """
    from .tvm_compat import Target, runs_as_view, structural_equal, structural_hash  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    cfg = cfg or EstimateConfig()
    if len(tasks) > cfg.max_tasks:
        raise InputError(f"the network has {len(tasks)} tasks, more than the limit of {cfg.max_tasks}")
    descriptor = predictor.device_of(device, target)
    device_id = descriptor.device_id if descriptor is not None else None
    tgt = target if target is not None else (descriptor.target if descriptor is not None else None)
    if tgt is None:
        raise InputError("target: the checkpoint records no device; give a target")
    tgt = tgt if isinstance(tgt, Target) else Target(tgt)
    database = database or {}
    out = NetworkEstimate(device=device_id, warm_learned="warm" in predictor.protocols(device_id))
    for task in tasks:
        key = str(structural_hash(task.mod))
        hit = database.get(key)
        if hit is None:  # a database written by another TVM may hash differently: compare structurally
            hit = next((v for v in database.values() if structural_equal(v[0], task.mod)), None)
        measured = measured_warm = None
        if hit is not None:
            best = hit[1]
            candidates = [_scheduled(task.mod, best.record.trace)]
            source, measured, measured_warm = "database", best.measured_s, best.warm_s
            detail = f"the fastest of the database's {best.records} measured records of this workload"
        else:
            cache_key = (key, device_id, str(tgt), cfg.samples, cfg.seed)
            kept = sampled.get(cache_key) if sampled is not None else None
            candidates = [kept[0]] if kept is not None else sample_schedules(task.mod, tgt, cfg.samples, cfg.seed)
            source = "sampled"
            count = kept[1] if kept is not None else len(candidates)
            detail = (f"the best-predicted of {count} schedules sampled from the design space (not tuned)" if count > 1
                      else "the one program of its design space" if cfg.samples > 1 else "one schedule sampled from "
                      "the design space (not tuned)")
        # the prediction core; a checkpoint trained with trace tokens reads each schedule's trace
        names = [f"task {task.name}, schedule {j}" for j in range(len(candidates))]
        chosen = predictor.predict_each(candidates, tgt, device_id, names, intervals=len(candidates) == 1,
                                        keep_inputs=True)
        if not np.isfinite(chosen.latency_s).any():
            why = next((p for p in chosen.problems if p), "no prediction")
            raise InputError(f"task {task.name}: none of its {len(candidates)} schedules can be featurized ({why})")
        i = int(np.nanargmin(chosen.latency_s))
        program = FeaturizedProgram(chosen.trees[i], None if chosen.traces is None else chosen.traces[i])
        if hit is None and sampled is not None and kept is None:
            sampled.put(cache_key, program, len(candidates))
        if len(candidates) > 1:  # the interval of the chosen schedule alone, from its features
            chosen, i = predictor.predict_each([program], tgt, device_id, on_error="raise"), 0
        lat, low, high = (float(v[i]) for v in (chosen.latency_s, chosen.low_s, chosen.high_s))
        warm = (float(predictor.predict_each([program], tgt, device_id, intervals=False, on_error="raise",
                                             protocol="warm").latency_s[0])
                if out.warm_learned else None)
        out.tasks.append(TaskEstimate(task.name, task.weight, key, source, detail, lat, low, high, measured, warm,
                                      measured_warm, runs_as_view(task.mod)))
    kernels = [t for t in out.tasks if not t.view]
    out.total_s = float(sum(t.weight * t.latency_s for t in kernels))
    out.low_s = float(sum(t.weight * t.low_s for t in kernels))
    out.high_s = float(sum(t.weight * t.high_s for t in kernels))
    if kernels and all(t.measured_s is not None for t in kernels):
        out.measured_total_s = float(sum(t.weight * t.measured_s for t in kernels))
    if kernels and all(t.measured_warm_s is not None for t in kernels):
        out.measured_warm_total_s = float(sum(t.weight * t.measured_warm_s for t in kernels))
    if out.warm_learned:
        out.warm_total_s = float(sum(t.weight * t.warm_s for t in kernels))
    if descriptor is not None and descriptor.vm_call_s > 0:
        out.between_kernels_s = descriptor.vm_entry_s + descriptor.vm_call_s * sum(t.weight for t in kernels)
    return out


def format_estimate(est: NetworkEstimate) -> str:
    """A per-task table (milliseconds) and the weighted total, as a simulator would print it."""
    lines = [f"device {est.device}", f"{'task':40s} {'weight':>6s} {'source':>8s} {'ms':>9s} {'10-90% ms':>19s}"]
    for t in est.tasks:
        lines.append(
            f"{t.task[:40]:40s} {t.weight:6d} {t.source:>8s} {1e3 * t.latency_s:9.4f} "
            f"{1e3 * t.low_s:9.4f}-{1e3 * t.high_s:<9.4f}" + (" view: runs as a reshape of its input, not summed"
                                                            if t.view else "")
        )
    lines.append(f"total (sum of weight x latency): {1e3 * est.total_s:.3f} ms ({1e3 * est.low_s:.3f}-{1e3 * est.high_s:.3f})"
                 " (cold: each kernel alone, caches flushed)")
    if est.warm_total_s is not None:
        lines.append(f"in-network total (warm protocol): {1e3 * est.warm_total_s:.3f} ms")
    else:
        lines.append("in-network total (warm): not learned for this device (its folder has no warm timings)")
    if est.between_kernels_s is not None:
        lines.append(f"between kernels (Relax VM, measured on the device): {1e3 * est.between_kernels_s:.3f} ms; "
                     f"one inference: {1e3 * est.network_s:.3f} ms")
    return "\n".join(lines)
