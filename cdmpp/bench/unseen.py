"""The held-out test networks' tasks, for the benchmarks' unseen-network tests.

The networks themselves are the product's (:mod:`cdmpp.networks.unseen`); this module
extracts and ranks their tuning tasks for ``cdmpp bench tune``, ``speed`` and
``tune --whole-network``.
"""

from __future__ import annotations

from cdmpp.collect.sampling import extract_spec_tasks
from cdmpp.networks import NetworkSpec
from cdmpp.networks.unseen import network_spec, unseen_network, unseen_networks

__all__ = ["network_spec", "network_tasks", "unseen_network", "unseen_networks", "unseen_tasks"]


def unseen_tasks(name: str, target) -> list[tuple[str, float, object, int]]:
    """The MetaSchedule tuning tasks of a network outside the zoo, largest first.

    Args:
        name: one of :func:`unseen_networks`.
        target: TVM ``Target`` the tasks are extracted for.

    Returns:
        ``(task_name, weight, workload IRModule, rank)`` per task in weight x FLOPs order
        (``rank`` 0: the largest), as :func:`cdmpp.bench.tune.choose_tasks` returns them.

    Raises:
        UnknownNetworkError: ``name`` is not a network outside the zoo.
    """
    return _ranked(unseen_network(name), target)


def network_tasks(name: str, target) -> list[tuple[str, float, object, int]]:
    """:func:`unseen_tasks` of a network outside the zoo or of a zoo network
    (:func:`cdmpp.networks.get_network`), extracted for ``target``.

    Raises:
        UnknownNetworkError: neither.
    """
    return _ranked(network_spec(name), target)


def _ranked(spec: NetworkSpec, target) -> list[tuple[str, float, object, int]]:

    tasks = sorted(extract_spec_tasks(spec, target), key=lambda t: -t.weight * t.flops)
    return [(t.task_name, float(t.weight), t.mod, r) for r, t in enumerate(tasks)]
