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

Modules, one per concern:

- :mod:`.config`: what to collect and the timing protocol (dataclasses, validated on construction);
- :mod:`.store`: the record store (append-only JSONDatabase) and the manifest;
- :mod:`.machine`: machine control shared with the benchmarks (stage clock, quiet guard, pooled builder);
- :mod:`.timing`: the timing protocol (inputs, adaptive repeats, a batch's build-time-store steps);
- :mod:`.sampling`: task extraction and schedule sampling (random, then evolutionary, then the tuned phase);
- :mod:`.loop`: the collection loop (:func:`collect`);
- :mod:`.remeasure`: import, remeasure and measuring given programs.
"""

from cdmpp.collect.quiet import QuietGuard, quiet_runner

from .config import (
    INPUT_FILL,
    SAMPLING_POLICY,
    TUNED_POLICY,
    CollectConfig,
    CollectSummary,
    MachineBusyError,
    MeasureConfig,
    QuietConfig,
    RPCSettings,
)
from .loop import collect
from .machine import STAGES, PooledBuilder, StageClock
from .remeasure import import_database, measure_programs, remeasure
from .sampling import extract_network_tasks, sample_schedules, sampling_threads
from .timing import adaptive_run_evaluator, index_bounds, stops_early

__all__ = [
    "INPUT_FILL",
    "SAMPLING_POLICY",
    "TUNED_POLICY",
    "STAGES",
    "CollectConfig",
    "CollectSummary",
    "MachineBusyError",
    "MeasureConfig",
    "PooledBuilder",
    "QuietConfig",
    "QuietGuard",
    "RPCSettings",
    "StageClock",
    "adaptive_run_evaluator",
    "collect",
    "extract_network_tasks",
    "import_database",
    "index_bounds",
    "measure_programs",
    "quiet_runner",
    "remeasure",
    "sample_schedules",
    "sampling_threads",
    "stops_early",
]
