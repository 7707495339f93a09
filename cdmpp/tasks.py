"""The one task type: a tuning task of a network, as the collector, the estimate, ``cdmpp
tune`` and the benchmarks hold it, and the tasks of a Relax module or a zoo network.
Imports nothing heavy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InputError

if TYPE_CHECKING:  # annotations only: TVM loads when a function runs
    from tvm.ir import IRModule
    from tvm.target import Target


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


def relax_tasks(mod: IRModule, target: Target) -> list[Task]:
    """The tuning tasks of a Relax IRModule for ``target`` (a ``Target`` or dict).

    Raises:
        InputError: ``mod`` is not an IRModule, or TVM cannot extract tasks from it.
    """
    from .tvm_compat import IRModule, Target, extract_tasks  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if not isinstance(mod, IRModule):
        raise InputError(f"relax: the JSON holds a {type(mod).__name__}, not an IRModule")
    target = target if isinstance(target, Target) else Target(target)
    try:
        extracted = extract_tasks(mod, target)
    except Exception as err:  # noqa: BLE001  TVM raises its own error types
        raise InputError(f"relax: TVM cannot extract tuning tasks from this module: {str(err).strip()[:300]}") from err
    return [Task(str(t.task_name), int(t.weight), t.dispatched[0]) for t in extracted]


def zoo_tasks(network: str, target: Target | dict | str) -> list[Task]:
    """The tuning tasks of a zoo network (:func:`cdmpp.networks.network_names`).

    Raises:
        UnknownNetworkError: not a zoo network.
    """
    from cdmpp.relax_import import relax_module_from_torch  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    from . import networks as zoo  # noqa: PLC0415  (keeps torch off this module's import)
    from .tvm_compat import Target  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    spec = zoo.get_network(network)
    target = target if isinstance(target, Target) else Target(target)
    return relax_tasks(relax_module_from_torch(spec.build(), spec.example_inputs(), target), target)
