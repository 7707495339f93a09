"""Kernel classes: tunable tasks, and untunable ones whose design space holds one program.

MetaSchedule's design space of a layout, normalisation, mask or elementwise task
(reshape, transpose, a layer norm, a cast) often holds a single program: its schedule
rules make no choice, so no tuner can change it and a cost model is judged by the level
it predicts for that one program.  A tunable task (a dense layer, a convolution) has
many programs, and a tuner keeps the one it believes fastest.

Figures are split by class because the two fail differently: a model can rank and
place tunable tasks well and miss the untunable ones by a constant factor, which decides
a network's estimate as much as any tuned kernel.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

TUNABLE = "tunable"
UNTUNABLE = "untunable"
#: a task's level counts as placed when predicted / measured is within this factor
WITHIN = 1.25


def kernel_class(mod, target) -> str:
    """:data:`UNTUNABLE` when MetaSchedule's post-order-apply design space of a task holds
    one program (one schedule whose trace samples nothing), else :data:`TUNABLE`.

    Args:
        mod: the task's workload, an IRModule with one PrimFunc.
        target: a TVM ``Target`` (or dict / tag) whose schedule rules span the space.
    """
    from .tvm_compat import Target, load_tensor_intrinsics, ms  # noqa: PLC0415  (keeps tvm off this module's import)

    target = target if isinstance(target, Target) else Target(target)
    load_tensor_intrinsics(target)
    ctx = ms.TuneContext(mod, target=target, space_generator="post-order-apply", task_name="space", num_threads=1)
    spaces = ctx.generate_design_space()
    return UNTUNABLE if len(spaces) == 1 and len(spaces[0].trace.decisions) == 0 else TUNABLE


@dataclass
class ClassLevel:
    """The level of one kernel class's tasks: predicted against measured, task by task.

    Attributes:
        tasks: tasks of the class.
        calls: their calls per inference (sum of task weights).
        measured_s: ``sum(weight * measured)``, seconds.
        predicted_s: ``sum(weight * predicted)``, seconds.
        mean_log_ratio: mean over tasks of ``log(predicted / measured)`` (0: level right;
            above 0: predicted slower than measured).
        within: share of tasks whose predicted / measured is within :data:`WITHIN`
            (either way).
        worst_ratio: the task's predicted / measured farthest from 1.
    """

    tasks: int
    calls: int
    measured_s: float
    predicted_s: float
    mean_log_ratio: float
    within: float
    worst_ratio: float


def class_levels(rows: Iterable[tuple[str, int, float, float]]) -> dict[str, ClassLevel]:
    """Each kernel class's :class:`ClassLevel` from per-task rows.

    Args:
        rows: ``(kernel class, task weight, predicted seconds, measured seconds)`` per
            task; a row without a positive, finite predicted and measured latency is left
            out.

    Returns:
        ``{class: ClassLevel}``, for the classes that have a task.
    """
    by_class: dict[str, list[tuple[int, float, float]]] = {}
    for cls, weight, pred, meas in rows:
        if pred is None or meas is None or not (math.isfinite(pred) and math.isfinite(meas)) or pred <= 0 or meas <= 0:
            continue
        by_class.setdefault(cls, []).append((int(weight), float(pred), float(meas)))
    out = {}
    for cls, items in by_class.items():
        logs = [math.log(p / m) for _, p, m in items]
        worst = max(logs, key=abs)
        out[cls] = ClassLevel(
            tasks=len(items), calls=sum(w for w, _, _ in items),
            measured_s=sum(w * m for w, _, m in items), predicted_s=sum(w * p for w, p, _ in items),
            mean_log_ratio=sum(logs) / len(logs),
            within=sum(abs(x) <= math.log(WITHIN) for x in logs) / len(logs),
            worst_ratio=math.exp(worst),
        )
    return out
