"""The one task type: a tuning task of a network, as the collector, the estimate, ``cdmpp
tune`` and the benchmarks hold it.  Imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Task:
    """One MetaSchedule tuning task: a workload and how often a network runs it.

    Attributes:
        name: MetaSchedule's task name (e.g. ``fused_conv2d_add_relu``).
        weight: task weight: how many times the network calls the workload per inference.
        mod: the workload, an ``IRModule`` with one PrimFunc (``None`` where only its key is
            known, e.g. a task named by a failure record).
        network: the zoo entry it was extracted from (``""``: not known).
        flops: floating-point operations of one call (TVM's ``estimate_tir_flops``; 0 when
            not known).
        workload_key: the workload's structural hash (``""`` until computed).
        rank: the task's place in its network's weight x FLOPs order (0: the largest; -1: not
            ranked).
    """

    name: str
    weight: int
    mod: object
    network: str = ""
    flops: float = 0.0
    workload_key: str = ""
    rank: int = -1
