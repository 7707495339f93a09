"""Leave-family-out folds, and what every split leaves out of training.

A validation workload shares its network, its operators and its shapes' family with
training workloads, so validation overstates what a model does on a network it never
saw.  A leave-family-out fold holds out every network of a set of architecture
families (the zoo's ``family``: all ResNets, all BERTs, ...): a model trained without
the fold is scored on the fold's workloads.  The zoo's families go to ``k`` folds by a
hash of the family name, so a family stays in its fold as the corpus grows.  The
operator sweep (family ``sweep``) is kernel data, not an architecture: it is in no
fold and trains with every fold, as nn-Meter's kernel measurements train its kernel
predictors; a sweep workload that a fold's network shares (by structural hash) is still
left out with the fold.

A split's held-out part is named like a network: ``"fold-2-of-4"`` is the second of
four folds (``cdmpp train --holdout fold-2-of-4``; ``cdmpp evaluate`` scores the
checkpoint on the fold it held out).  Every split also keeps the held-out test
networks' workloads (:func:`cdmpp.held_out.held_out_keys`) out of training and
validation.
"""

from __future__ import annotations

import re
import zlib

import numpy as np

from cdmpp.errors import InputError, UnknownNetworkError
from cdmpp.held_out import held_out_keys

_FOLD = re.compile(r"^fold-(\d+)-of-(\d+)$")


def fold_name(i: int, k: int) -> str:
    """The name of fold ``i`` (1-based) of ``k``: ``"fold-2-of-4"``."""
    return f"fold-{i}-of-{k}"


def parse_fold(holdout: str | None) -> tuple[int, int] | None:
    """``(i, k)`` of a fold name, ``None`` for a network name or ``None``.

    Raises:
        InputError: a fold name with ``k < 2`` or ``i`` outside ``1..k``.
    """
    m = _FOLD.match(holdout or "")
    if m is None:
        return None
    i, k = int(m.group(1)), int(m.group(2))
    if k < 2 or not 1 <= i <= k:
        raise InputError(f"{holdout!r}: a fold is fold-I-of-K with K >= 2 and 1 <= I <= K")
    return i, k


KERNEL_FAMILIES = ("sweep",)
"""Families of kernel measurements rather than architectures (the operator sweep): in no
fold, so that they train with every fold."""


def fold_of_family(family: str, k: int) -> int:
    """The fold (1-based, of ``k``) a family belongs to: CRC-32 of its name, modulo ``k``."""
    return zlib.crc32(family.encode()) % k + 1


def family_of(network: str) -> str:
    """:func:`cdmpp.networks.family_of` (the zoo and torch load on the first call)."""
    from cdmpp.networks import family_of as zoo_family  # noqa: PLC0415  (keeps torch off this module's import)

    return zoo_family(network)


def fold_networks(networks: list[str] | set[str], holdout: str) -> list[str]:
    """The networks of the fold ``holdout`` among ``networks``, sorted (never one of
    :data:`KERNEL_FAMILIES`).

    Raises:
        InputError: ``holdout`` is not a fold name, or the fold holds none of the networks.
    """
    fold = parse_fold(holdout)
    if fold is None:
        raise InputError(f"{holdout!r} is not a fold name like fold-1-of-4")
    i, k = fold
    out = sorted(n for n in networks if family_of(n) not in KERNEL_FAMILIES and fold_of_family(family_of(n), k) == i)
    if not out:
        raise InputError(f"{holdout} holds none of this dataset's networks; its families are in other folds")
    return out


def fold_table(networks: list[str] | set[str], k: int) -> dict[str, list[str]]:
    """Each fold's families among ``networks``: ``{"fold-1-of-4": [family, ...], ...}``."""
    out: dict[str, set[str]] = {fold_name(i, k): set() for i in range(1, k + 1)}
    for n in networks:
        fam = family_of(n)
        if fam not in KERNEL_FAMILIES:
            out[fold_name(fold_of_family(fam, k), k)].add(fam)
    return {f: sorted(v) for f, v in out.items()}


def holdout_keys(networks: dict[str, set[str]], holdout: str | None) -> set[str]:
    """The workload keys a split tests on: those of the network ``holdout``, of every
    network of the fold ``holdout``, or of every network of the family ``family:NAME``
    (``family:sweep``: the operator sweep); none for ``None``.

    Args:
        networks: workload keys of each network (the manifests' tasks).

    Raises:
        UnknownNetworkError: ``holdout`` is neither a network of ``networks`` nor a fold name.
        InputError: a fold that holds none of the networks.
    """
    if holdout is None:
        return set()
    if parse_fold(holdout) is not None:
        return set().union(*(networks[n] for n in fold_networks(set(networks), holdout)))
    if holdout.startswith("family:"):
        members = [n for n in networks if family_of(n) == holdout[len("family:"):]]
        if not members:
            raise InputError(f"no network of family {holdout[len('family:'):]!r} in this dataset")
        return set().union(*(networks[n] for n in members))
    if holdout not in networks:
        raise UnknownNetworkError(f"network {holdout!r} is not in this dataset; it has: {', '.join(sorted(networks))}"
                                  " (or name a leave-family-out fold, like fold-1-of-4)")
    return set(networks[holdout])


def never_trained(keys: np.ndarray) -> np.ndarray:
    """bool ``(P,)``: whether each program's workload key is a held-out test network's
    (:func:`cdmpp.held_out.held_out_keys`); such programs stay out of training and validation."""
    return np.isin(np.asarray(keys).astype(str), sorted(held_out_keys()))
