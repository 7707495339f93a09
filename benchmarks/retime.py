"""Stored tuning records built and timed again in one run.

A cloud VM's speed can change between runs (up to 2x on the 2-core VMs this project
measures on), so latencies recorded in different runs do not compare.  Timing the
records that a comparison names again, one after the other in the same run and with the
collector's protocol, makes them comparable: ``cdmpp bench truth-check --retime`` (each
task's chosen record) and ``cdmpp bench tune --reference R --retime`` (each run's best
record at the trial counts the held-out table compares).
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cdmpp.collect import MeasureConfig, QuietConfig
from cdmpp.collect.timing import local_bench, measure_batch
from cdmpp.device import DEVICE_FILE, DeviceDescriptor
from cdmpp.errors import InputError
from cdmpp.estimate import database_files
from cdmpp.records import iter_json_lines, parse_record, read_workload_lines
from cdmpp.tvm_compat import Workload, program_from_record


def retime_records(records: Mapping[Hashable, object], target, batch: int = 16) -> dict[Hashable, float]:
    """Build each MetaSchedule ``TuningRecord`` of ``records`` and time it now on this CPU,
    cold (:func:`retime_records_both`'s first half).

    Returns:
        ``{key: median seconds}`` of the records that built and ran (a failed one is
        left out).
    """
    return retime_records_both(records, target, batch)[0]


def retime_records_both(records: Mapping[Hashable, object], target,
                        batch: int = 16) -> tuple[dict[Hashable, float], dict[Hashable, float]]:
    """Build each MetaSchedule ``TuningRecord`` of ``records`` and time it now on this CPU
    with both of the collector's protocols.

    ``MeasureConfig()``'s repeats with a cache flush (cold), then the same program back
    to back without one (warm, as a kernel runs inside a network), every timing batch on
    a quiet machine (:class:`cdmpp.collect.QuietConfig`).

    Args:
        records: ``{key: TuningRecord}``.
        target: the TVM target the records were tuned for (this machine's).
        batch: programs built in parallel, then timed one at a time.

    Returns:
        ``({key: cold median seconds}, {key: warm median seconds})`` of the records that
        built and ran (a failed one is left out of each).
    """
    keys = list(records)
    fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=program_from_record(records[k])), args_info=records[k].args_info), i)
             for i, k in enumerate(keys)]
    bench = local_bench(MeasureConfig(), target, "cpu", QuietConfig())
    secs: dict[Hashable, float] = {}
    warm: dict[Hashable, float] = {}
    try:
        for s in range(0, len(fresh), batch):
            for _, i, run_secs, _, _ in measure_batch(bench, fresh[s : s + batch]):
                if run_secs is not None:
                    secs[keys[i]] = float(np.median([float(x) for x in run_secs]))
                if bench.warm_secs.get(i):
                    warm[keys[i]] = float(np.median(bench.warm_secs.pop(i)))
    finally:
        bench.close()
    return secs, warm


def check_measured_here(out_dir: Path, device: DeviceDescriptor) -> None:
    """Check that the tuning runs under ``out_dir`` were measured on ``device``.

    Raises:
        InputError: ``out_dir`` has no ``device.json``, or names another device; timing its
            records here would compare two machines.
    """
    path = Path(out_dir) / DEVICE_FILE
    if not path.exists():
        raise InputError(f"{out_dir} has no {DEVICE_FILE}: its measuring machine is unknown, so its records "
                         f"cannot be timed again on this one ({device.device_id})")
    there = json.loads(path.read_text()).get("device_id")
    if there != device.device_id:
        raise InputError(f"{out_dir} holds tuning runs of {there}; this machine is {device.device_id}: "
                         f"retime them on their own device")


def best_record_lines(trials: Sequence[Sequence[float] | None], trial_counts: Iterable[int]) -> dict[int, int]:
    """The line of the best measured record after each of ``trial_counts`` trials of a run.

    Args:
        trials: the run's ``run_secs`` (seconds) per record line, in measurement order,
            ``None`` for a failed one (:func:`benchmarks.tune.run_trials`). Trials count
            failed ones too (as :func:`benchmarks.tune.best_so_far` counts them).

    Returns:
        ``{trials: index of the record line}`` for each count the run reached with a
        successful trial.
    """
    meds = [float(np.median(s)) if s else np.inf for s in trials]
    out = {}
    for k in trial_counts:
        if 0 < k <= len(meds) and np.isfinite(min(meds[:k])):
            out[k] = int(np.argmin(meds[:k]))
    return out


def records_at_lines(work_dir: Path, lines: Iterable[int]) -> dict[int, object]:
    """The ``TuningRecord`` of each of ``lines`` (indices into the run's record file).

    Raises:
        InputError: a missing database file or a malformed line (named).
    """
    wl, rec = database_files(Path(work_dir))
    try:
        workloads = [Workload.from_json(o) for _, _, o in read_workload_lines(wl)]
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise InputError(f"{wl}: not a MetaSchedule workload file: {str(err).strip()[:200]}") from err
    want = set(lines)
    return {i: parse_record(obj, workloads, f"{rec}:{i + 1}")[1]
            for i, (_, obj) in enumerate(iter_json_lines(rec)) if i in want}
