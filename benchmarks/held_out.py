"""The held-out test networks' tasks, for the benchmarks' tests on networks never seen.

The networks themselves are the product's (:mod:`cdmpp.networks.held_out`); this module
extracts and ranks their tuning tasks for ``cdmpp bench tune``, ``speed`` and
``tune --whole-network``.
"""

from __future__ import annotations

import dataclasses

from cdmpp.collect.sampling import extract_spec_tasks
from cdmpp.networks import NetworkSpec
from cdmpp.networks.held_out import held_out_network, held_out_networks, network_spec
from cdmpp.tasks import Task

__all__ = ["network_spec", "network_tasks", "held_out_network", "held_out_networks", "held_out_tasks_of"]


def held_out_tasks_of(name: str, target) -> list[Task]:
    """The MetaSchedule tuning tasks of a network outside the zoo, largest first.

    Args:
        name: one of :func:`held_out_networks`.
        target: TVM ``Target`` the tasks are extracted for.

    Returns:
        Its :class:`cdmpp.tasks.Task` s in weight x FLOPs order, each with its ``rank`` (0:
        the largest), as :func:`benchmarks.tune.choose_tasks` returns them.

    Raises:
        UnknownNetworkError: ``name`` is not a network outside the zoo.
    """
    return _ranked(held_out_network(name), target)


def network_tasks(name: str, target) -> list[Task]:
    """:func:`held_out_tasks_of` of a network outside the zoo or of a zoo network
    (:func:`cdmpp.networks.get_network`), extracted for ``target``.

    Raises:
        UnknownNetworkError: neither.
    """
    return _ranked(network_spec(name), target)


def _ranked(spec: NetworkSpec, target) -> list[Task]:
    tasks = sorted(extract_spec_tasks(spec, target), key=lambda t: -t.weight * t.flops)
    return [dataclasses.replace(t, rank=r) for r, t in enumerate(tasks)]
