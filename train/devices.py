"""One model over every measured device: the pooled corpus, its strict split, training.

CDMPP (EuroSys 2024) makes one predictor serve several devices.  Here every device
folder of a dataset joins one training set; each program carries its device's row
in the model's device table (:class:`~cdmpp.model.LatencyTransformer`, a
learned embedding plus the device descriptor of :func:`cdmpp.device.descriptor_vector`).

The split is strict: holding out a network holds out every workload of that
network on *every* device, and the validation workloads (a tenth of the rest,
drawn once by workload key) are validation on every device too, so no task has
programs on both sides of any split, whichever device measured them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.device import DEFAULT_CACHES, DeviceDescriptor, descriptor_vector, device_caches
from cdmpp.errors import InputError, UnknownNetworkError
from cdmpp.featurize.batch import FeaturizedPrograms
from cdmpp.featurize.folder import cached_device_folder, featurize_folder, measured_repeats
from cdmpp.featurize.trace import TRACE_DIM, folder_traces, model_inputs, with_trace_tokens
from cdmpp.predictor import LatencyPredictor

from .folds import holdout_keys, never_trained
from .metrics import summary
from .report import task_weights
from .splits import Split, networks_of


@dataclass
class DeviceCorpus:
    """Featurized programs of several devices, one after another.

    Attributes:
        data: every program; ``data.device_row`` is the program's device row (1-based:
            row ``d`` is ``devices[d - 1]``), and ``data.workload_keys`` are
            qualified by device row (``"<row name>:<structural hash>"``,
            :attr:`cdmpp.device.DeviceDescriptor.row_name`), so that within-task terms
            never compare two devices' (or two protocols') latencies.
        raw_keys: str ``(P,)``: each program's unqualified workload key.
        devices: the devices, in row order.
        manifests: each device row's manifest, by row name (a device's cold and warm
            rows share theirs).
        folders: each device row's folder, by row name.
        repeat_cv: float64 ``(P,)``: each program's timing repeats' std / mean.
        twin: int64 ``(P,)``: the program whose tuning record each program is: itself, or
            for a program of a warm-protocol row (``protocol="warm"``), the same program
            of its device's cold row (they share a schedule trace); ``None``: itself.
    """

    data: FeaturizedPrograms
    raw_keys: np.ndarray
    devices: list[DeviceDescriptor]
    manifests: dict[str, dict]
    folders: dict[str, Path]
    repeat_cv: np.ndarray
    twin: np.ndarray | None = None

    def networks(self) -> dict[str, set[str]]:
        """Workload keys of each network, over every device's manifest."""
        out: dict[str, set[str]] = {}
        for m in self.manifests.values():
            for net, keys in networks_of(m).items():
                out.setdefault(net, set()).update(keys)
        return out

    def for_model(self, config, traces: bool = True) -> "DeviceCorpus":
        """This corpus in the input columns of a model with ``config``
        (:func:`cdmpp.featurize.trace.model_inputs`: each program's trace token for a
        trace-token model, none with ``traces=False``)."""

        if self.twin is None or not (config.trace_tokens and traces):
            folders = [self.folders[d.row_name] for d in self.devices]
            return dataclasses.replace(self, data=model_inputs(config, self.data, folders, traces))
        # a warm row's programs are its device's programs again: their traces are read once, from the cold rows
        cold = np.flatnonzero(self.twin == np.arange(len(self.twin)))
        folders = [self.folders[d.row_name] for d in self.devices if d.protocol == "cold"]
        matrix = np.zeros((len(self.twin), TRACE_DIM), dtype=np.float32)
        matrix[cold] = folder_traces(folders, self.data.latency[cold])
        data = model_inputs(dataclasses.replace(config, trace_tokens=False, trace_optional=False), self.data)  # its loops
        return dataclasses.replace(self, data=with_trace_tokens(data, matrix[self.twin]))

    def descriptors(self) -> np.ndarray:
        """float32 ``(len(devices) + 1, DESCRIPTOR_DIM)``: row 0 zeros (unknown device), then each device's."""
        rows = [np.zeros_like(descriptor_vector(self.devices[0]))] if self.devices else []
        return np.stack(rows + [descriptor_vector(d) for d in self.devices]).astype(np.float32)

    def caches(self) -> np.ndarray:
        """int64 ``(len(devices) + 1, 3)``: bytes of each row's L1 data cache, L2 and L3
        (:func:`cdmpp.device.device_caches`); row 0 (unknown device) the defaults."""
        return np.asarray([DEFAULT_CACHES] + [device_caches(d) for d in self.devices], dtype=np.int64)


def tuned_phase(corpus: DeviceCorpus) -> np.ndarray:
    """Which programs a collection's tuned phase measured (the fast-end policy,
    :data:`cdmpp.collect.config.TUNED_POLICY`).

    A task's manifest entry gives ``tuned_from``, the count of its records (in file order)
    measured before its tuned phase began; the corpus keeps each folder's records in file
    order, so a task's programs from that rank on are the tuned ones.

    Returns:
        bool ``(P,)``, True for a tuned-phase program.
    """
    out = np.zeros(len(corpus.data), dtype=bool)
    for row, descriptor in enumerate(corpus.devices, start=1):
        starts = ds.tuned_starts(corpus.manifests[descriptor.row_name])
        if not starts or descriptor.protocol == "warm":  # a warm row: its cold twin's, below
            continue
        idx = np.flatnonzero(corpus.data.device_row == row)
        keys = corpus.raw_keys[idx]
        for key, start in starts.items():
            out[idx[keys == key][start:]] = True
    return out if corpus.twin is None else out[corpus.twin]


def device_of_manifest(manifest: dict, folder: Path) -> DeviceDescriptor:
    """The device descriptor a device folder's manifest records.

    Raises:
        DatasetError: the manifest records no device.
    """
    device_json = manifest.get("device")
    if not device_json:
        raise ds.DatasetError(f"{folder}: the manifest records no device; every pooled folder needs one")
    return DeviceDescriptor.from_json(device_json)


def _roots(roots: Path | Sequence[Path]) -> list[Path]:
    return [Path(roots)] if isinstance(roots, (str, Path)) else [Path(r) for r in roots]


def dataset_label(roots: Path | Sequence[Path]) -> str:
    """One dataset folder, or several joined by ``", "``, as checkpoints record them."""
    return ", ".join(str(r) for r in _roots(roots))


def corpus_dirs(roots: Path | Sequence[Path]) -> list[Path]:
    """Device folders of one dataset folder or of several (``datasets/corpus`` and
    ``datasets/gpu``, say), in the order given, each dataset's sorted.

    Raises:
        DatasetError: a folder holds no device folder, or two hold the same device id.
    """
    dirs = [d for r in _roots(roots) for d in ds.device_dirs(r)]
    seen: dict[str, Path] = {}
    for d in dirs:
        if d.name in seen:
            raise ds.DatasetError(f"device folder {d.name} is in both {seen[d.name].parent} and {d.parent}; pool it once")
        seen[d.name] = d
    return dirs


def load_corpus(
    root: Path | Sequence[Path], cache_dir: Path | None, exclude: tuple[str, ...] = (), progress: bool = True,
    loops: bool = False, workers: int = 1, protocols: bool | Collection[str] = True,
) -> DeviceCorpus:
    """Featurize (or read from the cache) every device folder under ``root`` (with each
    program's loop tokens when ``loops``: a cache entry without them is featurized again).

    A folder with warm timings (:data:`cdmpp.dataset.WARM_RECORD_FILE`) gives, with
    ``protocols``, a second device right after its own: the same descriptor with
    ``protocol="warm"`` (its row named :attr:`cdmpp.device.DeviceDescriptor.row_name`) and the same
    programs, labelled with their warm latencies, so that a model learns both protocols,
    the protocol being its device row.

    Args:
        root: a dataset folder holding device folders, or several such folders
            (:func:`corpus_dirs`).
        exclude: device ids to leave out (for example the device of a
            leave-one-device-out run).
        workers: processes that featurize a large folder that is not cached
            (:func:`cdmpp.featurize.parallel.featurize_records`).
        protocols: which folders' warm timings give warm rows: ``True`` every folder's,
            ``False`` none, or a collection of device ids (those folders' only).

    Raises:
        DatasetError: no device folder, an excluded id that is not there, a device
            folder in two of the roots, or a folder without a recorded device.
    """
    dirs = corpus_dirs(root)
    names = {d.name for d in dirs}
    missing = [e for e in exclude if e not in names]
    if missing:
        raise ds.DatasetError(f"no device folder {', '.join(missing)} under {root}; it has {', '.join(sorted(names))}")
    parts, raw, devices, manifests, folders, cvs, twins = [], [], [], {}, {}, [], []
    offset = 0  # programs before this folder's
    for folder in dirs:
        if folder.name in exclude:
            continue
        manifest = ds.read_manifest(folder)
        light = measured_repeats(folder)
        data = cached_device_folder(folder, Path(cache_dir), light) if cache_dir is not None else None
        if data is None or light is None or len(light[1]) != len(data) or (loops and not data.has_loops):
            # not cached yet (or cached without the loop tokens): parse the records into TVM objects and featurize
            data, secs = featurize_folder(folder, cache_dir, progress=progress, loops=loops, workers=workers)
        else:
            secs = [a for _, a in light[1]]
        if len(data) == 0:
            continue
        cvs.append(np.asarray([a.std() / a.mean() for a in secs], dtype=np.float64))
        descriptor = device_of_manifest(manifest, folder)
        row = len(devices) + 1
        devices.append(descriptor)
        manifests[descriptor.row_name], folders[descriptor.row_name] = manifest, folder
        raw.append(np.asarray(data.workload_keys)[data.workload])
        parts.append(
            dataclasses.replace(
                data,
                workload_keys=[f"{descriptor.row_name}:{k}" for k in data.workload_keys],
                device_row=np.full(len(data), row, dtype=np.int64),
            )
        )
        twins.append(offset + np.arange(len(data), dtype=np.int64))
        cold_offset, offset = offset, offset + len(data)
        wants_warm = protocols if isinstance(protocols, bool) else descriptor.device_id in protocols
        warm = ds.warm_repeats(folder) if wants_warm else None
        if warm is not None and len(warm) == len(data) and any(w is not None for w in warm):
            # the warm protocol: a device row of its own (same descriptor, its own embedding), its programs
            # the folder's programs timed warm, with their warm labels
            keep = np.flatnonzero([w is not None for w in warm])
            wdev = dataclasses.replace(descriptor, protocol="warm")
            devices.append(wdev)
            manifests[wdev.row_name], folders[wdev.row_name] = manifest, folder
            sub = data.subset(keep)
            raw.append(np.asarray(sub.workload_keys)[sub.workload])
            parts.append(dataclasses.replace(
                sub, latency=np.asarray([np.median(warm[i]) for i in keep], dtype=np.float64),
                workload_keys=[f"{wdev.row_name}:{k}" for k in sub.workload_keys],
                device_row=np.full(len(keep), len(devices), dtype=np.int64)))
            cvs.append(np.asarray([warm[i].std() / warm[i].mean() for i in keep], dtype=np.float64))
            twins.append(cold_offset + keep.astype(np.int64))
            offset += len(keep)
    if not parts:
        raise ds.DatasetError(f"no measured program under {root}")
    return DeviceCorpus(
        FeaturizedPrograms.concat(parts), np.concatenate(raw), devices, manifests, folders, np.concatenate(cvs),
        np.concatenate(twins),
    )


def split_corpus(corpus: DeviceCorpus, holdout: str | None, val_fraction: float = 0.1, seed: int = 0,
                 exclude_test_networks: bool = True) -> Split:
    """The strict split of a pooled corpus (see the module docstring).

    Args:
        holdout: the network whose workloads are the test set on every device, or a
            leave-family-out fold (``"fold-2-of-4"``, :mod:`train.folds`); ``None``
            tests nothing.
        val_fraction: fraction of the remaining workload keys kept for validation.
        exclude_test_networks: keep the held-out test networks' workloads
            (:func:`cdmpp.held_out.held_out_keys`) out of training and validation;
            ``False`` draws the split of a checkpoint trained before that rule.

    Raises:
        ValueError: an unknown network, or nothing left to train on.
    """
    is_test = np.isin(corpus.raw_keys, sorted(holdout_keys(corpus.networks(), holdout)))
    out = never_trained(corpus.raw_keys) & ~is_test if exclude_test_networks else np.zeros_like(is_test)
    rest = np.unique(corpus.raw_keys[~is_test & ~out])
    if rest.size == 0:
        raise InputError(f"holding out {holdout!r} leaves no training program")
    n_val = max(1, int(round(val_fraction * rest.size))) if rest.size > 1 else 0
    val_keys = np.random.default_rng(seed).choice(rest, size=n_val, replace=False)
    is_val = np.isin(corpus.raw_keys, val_keys) & ~is_test
    idx = np.arange(len(corpus.raw_keys))
    return Split(idx[~is_test & ~is_val & ~out], idx[is_val], idx[is_test], holdout or "none")


def split_within_tasks(
    corpus: DeviceCorpus, min_programs: int = 20, test_fraction: float = 0.1, val_fraction: float = 0.1, seed: int = 0
) -> Split:
    """TenSet's within-task protocol (NeurIPS 2021, section 5.1): programs of one task on
    both sides.

    Every (device, task) with at least ``min_programs`` programs gives a random
    ``test_fraction`` of them (at least 2) to the test set; a random ``val_fraction`` of
    the rest of all programs is validation; everything else trains.  This measures
    ranking inside known tasks, the setting of a tuner that has measured some of a task.

    Raises:
        InputError: no task has ``min_programs`` programs.
    """
    rng = np.random.default_rng(seed)
    w = corpus.data.workload
    test = []
    for g in np.unique(w):
        members = np.flatnonzero(w == g)
        if members.size >= min_programs:
            k = max(2, int(round(test_fraction * members.size)))
            test.append(rng.choice(members, size=k, replace=False))
    if not test:
        raise InputError(f"no task has {min_programs} programs: nothing to split within tasks")
    test = np.sort(np.concatenate(test))
    rest = np.setdiff1d(np.arange(len(w)), test)
    val = np.sort(rng.choice(rest, size=int(round(val_fraction * rest.size)), replace=False))
    return Split(np.setdiff1d(rest, val), val, test, f"within tasks of >= {min_programs} programs")


def split_cdmpp(
    corpus: DeviceCorpus,
    holdout: str,
    min_programs: int = 48,
    max_cv: float = 0.01,
    val_fraction: float = 0.1,
    seed: int = 0,
) -> tuple[Split, dict[str, int]]:
    """CDMPP's cross-model protocol (its released scripts), applied as far as this data allows.

    1. Keep only (device, task) pairs with at least ``min_programs`` programs.
    2. Of those, drop programs whose timing repeats' std / mean exceeds ``max_cv``.
    3. Test: every kept program of a workload of ``holdout``.  Training: every kept
       program of a workload of another network, so a workload the held-out network
       shares with a training network is on both sides (CDMPP does this; the strict
       split does not).  Validation: a ``val_fraction`` of the training workloads that
       are not in the test set.

    Returns:
        ``(split, counts)``: ``counts`` gives the programs left after each filter
        (``all``, ``tasks_with_min_programs``, ``low_noise``) and how many test
        programs belong to workloads also in training (``test_shared``).

    Raises:
        UnknownNetworkError: ``holdout`` is not in the corpus.
        InputError: nothing is left to train or test on.
    """
    nets = corpus.networks()
    if holdout not in nets:
        raise UnknownNetworkError(f"network {holdout!r} is not in this dataset; it has: {', '.join(sorted(nets))}")
    w = corpus.data.workload
    counts = np.bincount(w, minlength=len(corpus.data.workload_keys))
    big = counts[w] >= min_programs
    keep = big & (corpus.repeat_cv <= max_cv)
    test_keys = nets[holdout]
    other_keys = set().union(*(k for n, k in nets.items() if n != holdout))
    in_test = np.isin(corpus.raw_keys, sorted(test_keys)) & keep
    in_train = np.isin(corpus.raw_keys, sorted(other_keys)) & keep
    if not in_test.any() or not in_train.any():
        raise InputError(
            f"after the filters ({int(big.sum())} programs in tasks with >= {min_programs}, {int(keep.sum())} with "
            f"repeat CV <= {max_cv:g}) nothing is left to {'test' if not in_test.any() else 'train'} on"
        )
    train_only = np.unique(corpus.raw_keys[in_train & ~in_test])
    n_val = int(round(val_fraction * train_only.size))
    val_keys = np.random.default_rng(seed).choice(train_only, size=n_val, replace=False)
    is_val = in_train & ~in_test & np.isin(corpus.raw_keys, val_keys)
    idx = np.arange(len(w))
    split = Split(idx[in_train & ~is_val], idx[is_val], idx[in_test], f"CDMPP cross-model, held-out {holdout}")
    stats = {
        "all": int(len(w)),
        "tasks_with_min_programs": int(big.sum()),
        "low_noise": int(keep.sum()),
        "test": int(in_test.sum()),
        "test_shared": int((in_test & in_train).sum()),
        "train": int(len(split.train)),
        "val": int(len(split.val)),
    }
    return split, stats


def tree_inputs(data: FeaturizedPrograms, descriptors: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The tree baseline's input over several devices: summed ``PerStoreFeature`` and
    the device descriptor, float32 ``(len(index), 164 + DESCRIPTOR_DIM)``."""
    index = np.asarray(index, dtype=np.int64)
    return np.concatenate([data.psf_sum[index], descriptors[data.device_row[index]]], axis=1).astype(np.float32)


def device_task_weights(corpus: DeviceCorpus, network: str | None) -> dict[int, float]:
    """Task weight of each (device-qualified) workload index of ``corpus.data``."""
    return task_weights(corpus.manifests, corpus.data.workload_keys, network, qualified=True)


def score_by_device(model, tree, corpus: DeviceCorpus, index: np.ndarray, network: str | None) -> dict[str, dict]:
    """Metric rows (transformer, and the trees when given) of programs ``index``, per device row (by row name),
    for a model whose device rows are the corpus's."""
    return score_remapped(model, tree, corpus, index, network, corpus.data.device_row, corpus.descriptors())


def score_remapped(model, tree, corpus, index, network, model_rows, table, panels=None) -> dict[str, dict]:
    """Metric rows per device row (by row name) of programs ``index``.

    Args:
        model_rows: int64 ``(P,)``: each program's row in the model's device table.
        table: float32 ``(rows, DESCRIPTOR_DIM)``: the descriptor of each model row (the
            trees' device columns).
        panels: when given, filled with ``row name -> (predicted, measured, task of each program)``.
    """
    weights = device_task_weights(corpus, network)
    out = {}
    for row, descriptor in enumerate(corpus.devices, start=1):
        sel = index[corpus.data.device_row[index] == row]
        if sel.size == 0:
            continue
        true, groups = corpus.data.latency[sel], corpus.data.workload[sel]
        pred = LatencyPredictor(model, {}).predict_featurized(corpus.data, sel, device_rows=model_rows[sel])
        rows = {"cdmpp transformer": summary(pred, true, groups, weights)}
        if panels is not None:
            panels[descriptor.row_name] = (pred, true, groups)
        if tree is not None:
            x = np.concatenate([corpus.data.psf_sum[sel], table[model_rows[sel]]], axis=1)
            rows["xgboost PerStoreFeature"] = summary(tree.predict(x), true, groups, weights)
        out[descriptor.row_name] = rows
    return out
