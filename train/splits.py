"""Train/validation/test splits that hold out whole networks.

A workload (task) may occur in several networks.  The held-out test set is every
program of every workload of the held-out network; training uses only workloads
that do not occur in it, so no task has programs on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cdmpp.errors import InputError
from cdmpp.networks.sweep import PREFIX as SWEEP_PREFIX
from cdmpp.schema import tasks_of

from .config import SWEEP_WORKLOADS
from .folds import holdout_keys, never_trained


@dataclass
class Split:
    """Program indices of each side (int64 arrays) and what was held out."""

    train: np.ndarray
    val: np.ndarray
    test: np.ndarray
    holdout: str


def networks_of(manifest: dict) -> dict[str, set[str]]:
    """Workload keys of each network in a dataset manifest."""
    out: dict[str, set[str]] = {}
    for t in tasks_of(manifest):
        out.setdefault(t.network, set()).add(t.workload_key)
    return out


def holdout_network(
    workload: np.ndarray, workload_keys: list[str], manifest: dict, network: str | None, val_fraction=0.1, seed=0
) -> Split:
    """Hold out one network, or a leave-family-out fold (``"fold-2-of-4"``, :mod:`train.folds`), or none.

    The held-out test networks' workloads (:func:`cdmpp.held_out.held_out_keys`) are on
    no side unless they are the test set.

    Args:
        workload: int64 ``(P,)`` workload index of each program.
        workload_keys: structural-hash key of each workload index.
        manifest: the dataset manifest (tasks with network and workload key).
        network: the network or fold to hold out; ``None`` trains on everything (empty test).
        val_fraction: fraction of the training *workloads* kept for validation.
        seed: seed of the validation draw.

    Raises:
        ValueError: the network is not in the manifest, or nothing is left to train on.
    """
    keys = np.asarray(workload_keys)[workload]
    is_test = np.isin(keys, sorted(holdout_keys(networks_of(manifest), network)))
    is_test_network = never_trained(keys) & ~is_test  # the held-out test networks' workloads: never trained on
    train_w = np.unique(workload[~is_test & ~is_test_network])
    if train_w.size == 0:
        raise InputError(f"holding out {network!r} leaves no training program")
    rng = np.random.default_rng(seed)
    n_val = max(1, int(round(val_fraction * train_w.size))) if train_w.size > 1 else 0
    val_w = rng.choice(train_w, size=n_val, replace=False)
    is_val = np.isin(workload, val_w) & ~is_test
    idx = np.arange(workload.size)
    return Split(idx[~is_test & ~is_val & ~is_test_network], idx[is_val], idx[is_test], network or "none")


def random_programs(num_programs: int, test_fraction: float = 0.2, val_fraction: float = 0.1, seed: int = 0) -> Split:
    """Random split by program, for reference only.

    Programs of one task land on both sides: this measures interpolation within
    known tasks, not generalisation to unseen networks (its ``holdout`` says so).

    Raises:
        ValueError: fewer than 3 programs, or fractions outside (0, 1).
    """
    if num_programs < 3:
        raise InputError(f"a random split needs at least 3 programs, got {num_programs}")
    if not (0 < test_fraction < 1 and 0 <= val_fraction < 1 and test_fraction + val_fraction < 1):
        raise InputError(f"bad fractions: test {test_fraction}, validation {val_fraction}")
    perm = np.random.default_rng(seed).permutation(num_programs)
    n_test = max(1, int(round(test_fraction * num_programs)))
    n_val = int(round(val_fraction * num_programs))
    return Split(
        np.sort(perm[n_test + n_val :]),
        np.sort(perm[n_test : n_test + n_val]),
        np.sort(perm[:n_test]),
        "random programs (tasks on both sides)",
    )


def thin_training(split: Split, workload: np.ndarray, share: float, seed: int = 0) -> Split:
    """Keep a random ``share`` of each task's training programs (at least one per task).

    Args:
        split: the split whose ``train`` indices are thinned; ``val`` and ``test`` stay.
        workload: int64 array (n_programs,), each program's task (workload) index.
        share: in (0, 1]; 1 returns ``split`` unchanged.
        seed: seed of the draw.

    Returns:
        A ``Split`` whose ``train`` holds ``max(1, round(share * m))`` of each task's
        ``m`` training programs, sorted.
    """
    if share >= 1:
        return split
    rng = np.random.default_rng(seed)
    train = np.asarray(split.train)
    w = np.asarray(workload)[train]
    keep = []
    for g in np.unique(w):
        members = train[w == g]
        keep.append(rng.choice(members, size=max(1, int(round(share * members.size))), replace=False))
    return Split(np.sort(np.concatenate(keep)) if keep else train, split.val, split.test, split.holdout)


def drop_unstable_labels(split: Split, repeat_cv: np.ndarray, max_cv: float) -> Split:
    """Leave training programs whose timing repeats vary by more than ``max_cv`` out of training.

    CDMPP (EuroSys 2024, section 6.1) drops programs whose repeats vary by more than 1%.

    Args:
        split: the split whose ``train`` indices are filtered; ``val`` and ``test`` stay.
        repeat_cv: float64 ``(n_programs,)``, each program's repeats' std / mean.
        max_cv: the largest CV kept; ``<= 0`` returns ``split`` unchanged.

    Raises:
        InputError: ``repeat_cv`` does not cover the split, or no training program is left.
    """
    if max_cv <= 0:
        return split
    cv = np.asarray(repeat_cv, dtype=np.float64)
    train = np.asarray(split.train)
    if train.size and train.max() >= cv.size:
        raise InputError(f"repeat_cv has {cv.size} entries; the split indexes program {int(train.max())}")
    keep = train[cv[train] <= max_cv]
    if keep.size == 0:
        raise InputError(f"no training program has repeats within CV {max_cv}")
    return Split(keep, split.val, split.test, split.holdout)


def sweep_own_programs(networks: dict[str, set[str]], raw_keys: np.ndarray) -> np.ndarray:
    """Which programs are of the operator sweep's own workloads, bool ``(n_programs,)``: a
    workload of a sweep entry (:data:`cdmpp.networks.sweep.PREFIX`) that no zoo network shares.

    Args:
        networks: each network's (or sweep entry's) unqualified workload keys.
        raw_keys: str ``(n_programs,)``, each program's unqualified workload key.
    """
    zoo = set().union(*(k for n, k in networks.items() if not n.startswith(SWEEP_PREFIX)))
    own = set().union(*(k for n, k in networks.items() if n.startswith(SWEEP_PREFIX))) - zoo
    return np.isin(np.asarray(raw_keys).astype(str), sorted(own))


def drop_sweep_workloads(split: Split, networks: dict[str, set[str]], raw_keys: np.ndarray, workload: np.ndarray,
                         keep: str) -> Split:
    """Leave the operator sweep's own workloads out of training, or its tunable ones.

    A workload that only the sweep has (no zoo network shares it) is the sweep's own.  Its
    untunable tasks have one program (a design space of one program); its tunable tasks
    have a few random samples of their design space and no tuned schedule.

    Args:
        split: the split whose ``train`` indices are filtered; ``val`` and ``test`` stay.
        networks: each network's (or sweep entry's) unqualified workload keys.
        raw_keys: str ``(n_programs,)``, each program's unqualified workload key.
        workload: int64 ``(n_programs,)``, each program's device-qualified task: a task
            with more than one program is tunable.
        keep: ``"all"`` (``split`` unchanged), ``"untunable"`` (the sweep's own tunable
            tasks leave) or ``"none"`` (all the sweep's own workloads leave).

    Raises:
        InputError: an unknown ``keep``, or no training program left.
    """
    if keep not in SWEEP_WORKLOADS:
        raise InputError(f"keep must be one of {', '.join(SWEEP_WORKLOADS)}, got {keep!r}")
    if keep == "all":
        return split
    train = np.asarray(split.train)
    drop = sweep_own_programs(networks, raw_keys)[train]
    if keep == "untunable":
        workload = np.asarray(workload, dtype=np.int64)
        drop &= np.bincount(workload)[workload[train]] > 1
    if drop.all():
        raise InputError(f"no training program is left once the sweep's workloads ({keep} kept) leave")
    return Split(train[~drop], split.val, split.test, split.holdout)
