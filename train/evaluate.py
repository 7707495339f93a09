"""Scoring a checkpoint of one device: the transformer next to its baselines.

Used by ``cdmpp train`` (the rows of a device folder's split) and ``cdmpp evaluate``
(a saved checkpoint on a dataset's held-out network or on any MetaSchedule
JSONDatabase).  Checkpoints with a device table are scored by
:func:`cdmpp.train.devices.evaluate_devices`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.checkpoint import checkpoint_meta, load_checkpoint
from cdmpp.device import DEVICE_FILE, DeviceDescriptor
from cdmpp.errors import InputError, UnknownDeviceError
from cdmpp.featurize.batch import FeaturizedPrograms
from cdmpp.featurize.folder import featurize_database, featurized_device
from cdmpp.featurize.loops import with_loop_tokens
from cdmpp.featurize.trace import database_traces, lined_up, model_inputs, with_trace_tokens
from cdmpp.predictor import LatencyPredictor
from cdmpp.schema import tasks_of
from cdmpp.train.device_scores import evaluate_devices

from .baselines import FlopsBaseline, TreeBaseline
from .metrics import summary
from .report import BASELINE_FILE, task_weights
from .splits import holdout_network, networks_of


def load_featurized(dataset: Path, cache_dir: Path | None, progress: bool = True, loops: bool = False):
    """``(DeviceDatabase, FeaturizedPrograms)`` of a dataset's only device folder (or of a
    device folder); ``loops``: with the programs' loop tokens (a cache entry without them
    is featurized again).  Both read the records as plain JSON where TVM accepts every
    record (:func:`cdmpp.featurize.folder.featurized_device`): the database's programs
    then hold each record's JSON, not a TVM ``TuningRecord``.

    Raises:
        DatasetError: no device folder, several (name one: ``<dataset>/<device_id>``),
            or no measured record.
    """
    dirs = ds.device_dirs(dataset)
    if len(dirs) > 1:
        raise ds.DatasetError(
            f"{dataset} holds several devices ({', '.join(d.name for d in dirs)}): give one device folder"
        )
    return featurized_device(dirs[0], cache_dir, progress=progress, loops=loops)


def score_models(predictor: LatencyPredictor, extra: dict, data: FeaturizedPrograms, index: np.ndarray,
                 weights=None) -> dict[str, dict]:
    """Metric rows of the transformer (read through ``predictor``, each program at its
    ``data.device_row`` row) and the baselines in ``extra`` on programs ``index``."""
    true, groups = data.latency[index], data.workload[index]
    pred = predictor.predict_featurized(data, index)
    rows = {"cdmpp transformer": summary(pred, true, groups, weights)}
    if extra.get("tree") is not None:
        rows["xgboost PerStoreFeature"] = summary(extra["tree"].predict(data.psf_sum[index]), true, groups, weights)
    if extra.get("flops") is not None:
        rows["FLOPs / best throughput"] = summary(extra["flops"].predict(data.flops[index]), true, groups, weights)
    return rows


def evaluate_checkpoint(
    checkpoint: Path,
    dataset: Path | None = None,
    workload_db: Path | None = None,
    record_db: Path | None = None,
    holdout: str | None = "auto",
    cache_dir: Path | None = None,
    progress: bool = True,
    traces: bool = True,
    device: str | None = None,
) -> tuple[dict[str, dict], str]:
    """Score a saved checkpoint (and its tree baseline, if saved) on data it was not trained on.

    Either ``dataset`` (a cdmpp dataset folder; scored on its held-out network, by
    default the one recorded in the checkpoint) or ``workload_db`` + ``record_db``
    (any MetaSchedule JSONDatabase; scored on all its records, as measured on
    ``device``: :func:`database_device`).

    Returns:
        ``(rows, title)``.

    Raises:
        CheckpointError, DatasetError, ValueError: bad checkpoint, bad data or bad split.
    """
    model, meta = load_checkpoint(checkpoint)
    predictor = LatencyPredictor(model, meta)
    extra = {}
    if (Path(checkpoint) / BASELINE_FILE).exists():
        extra["tree"] = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE)
    if "flops_baseline_throughput" in meta:
        extra["flops"] = FlopsBaseline()
        extra["flops"].throughput_ = float(meta["flops_baseline_throughput"])
        extra["flops"].floor_ = float(meta["flops_baseline_floor"])
    weights = None
    if dataset is not None:
        db, data = load_featurized(dataset, cache_dir, progress, loops=model.config.loop_tokens)
        data = model_inputs(model.config, data, ds.device_dirs(dataset)[:1], traces)  # with the records' traces
        data, note = _for_device(predictor, db, data)
        net = checkpoint_meta(meta).holdout if holdout == "auto" else holdout
        weights = task_weights({db.device_id: db.manifest}, data.workload_keys, net)
        if net is None:
            index = np.arange(len(data))
            title = f"all {len(data)} programs of {dataset} (device {db.device_id})"
        else:
            index = holdout_network(data.workload, data.workload_keys, db.manifest, net).test
            title = f"held-out network {net} of {dataset} (device {db.device_id})"
    else:
        if workload_db is None or record_db is None:
            raise InputError("give a dataset folder, or both a workload and a tuning-record file")
        device_id, manifest = database_device(meta, [Path(record_db)], device)
        db, data = _database_inputs(model, Path(workload_db), Path(record_db), device_id, manifest, cache_dir,
                                    progress, traces)
        data, note = _for_device(predictor, db, data)
        index = np.arange(len(data))
        extra.pop("flops", None)  # a bare JSONDatabase records no FLOPs
        title = f"all {len(data)} programs of {record_db}"
    if model.config.trace_tokens and not traces:
        title += ", without their traces"
    return score_models(predictor, extra, data, index, weights), title + note


@dataclasses.dataclass
class EvaluateOptions:
    """What :func:`evaluate` scores and how.

    Attributes:
        holdout: ``"auto"`` (the checkpoint's held-out network), a network name, ``None``
            (every program), or, for a checkpoint with a device table on dataset folders,
            ``"validation"`` / ``"training"`` (that part of its own split).
        traces: read each program's schedule trace from its tuning record (a trace-token
            checkpoint); ``False`` scores the programs as bare PrimFuncs (a checkpoint
            trained with trace dropout).
        plot: a PNG path for predicted against measured latency, one panel per device
            (a checkpoint with a device table, on dataset folders).
        cache_dir: featurization cache folder.
        progress: show progress bars.
        device: the device a JSONDatabase or a tuned set was measured on (a device id);
            ``None``: the one its path names, else this machine (:func:`database_device`).
    """

    holdout: str | None = "auto"
    traces: bool = True
    plot: Path | None = None
    cache_dir: Path | None = None
    progress: bool = True
    device: str | None = None


def evaluate(checkpoint: Path, datasets: list[Path] | None = None, workload_db: Path | None = None,
             record_db: Path | None = None, options: EvaluateOptions | None = None) -> tuple[dict, str, bool]:
    """Score a checkpoint on dataset folders (one or several) or on one MetaSchedule
    JSONDatabase: the one implementation behind ``cdmpp evaluate``.

    A checkpoint with a device table is scored per device on every device folder of
    ``datasets`` that it knows (:func:`cdmpp.train.devices.evaluate_devices`); a
    one-device checkpoint, a device folder it does not know (zero-shot, from the
    device's descriptor) or a JSONDatabase in one table (:func:`evaluate_checkpoint`).

    Returns:
        ``(rows, title, per_device)``: with ``per_device``, ``rows`` maps each device id to
        its rows; else it maps each model to its row.

    Raises:
        InputError: no source, or an option the source does not take (named).
        CheckpointError, DatasetError: a bad checkpoint or bad data.
    """
    opt = options or EvaluateOptions()
    if not datasets and (workload_db is None or record_db is None):
        raise InputError("give dataset folders, or a JSONDatabase (a work dir, or a workload and a record file)")
    meta = load_checkpoint(Path(checkpoint))[1]
    known = {d.device_id for d in checkpoint_meta(meta).devices}
    if datasets and any(d.name in known for root in datasets for d in ds.device_dirs(root)):
        root = datasets if len(datasets) > 1 else datasets[0]
        rows, title = evaluate_devices(Path(checkpoint), root, opt.holdout, opt.cache_dir, opt.progress, opt.plot,
                                       opt.traces)
        return rows, title, True
    what = f"{checkpoint} (no device table)" if datasets else "a JSONDatabase"
    if opt.plot is not None:
        raise InputError(f"--plot draws one panel per device of a checkpoint with a device table on dataset "
                         f"folders; not for {what}")
    if opt.holdout in ("validation", "training"):
        raise InputError(f"holdout {opt.holdout!r} scores part of a device-table checkpoint's own split; not for {what}")
    if datasets and len(datasets) > 1:
        raise InputError(f"{checkpoint} has no device table: score it on one device folder, not {len(datasets)}")
    rows, title = evaluate_checkpoint(Path(checkpoint), dataset=datasets[0] if datasets else None,
                                      workload_db=workload_db, record_db=record_db,
                                      holdout=opt.holdout if datasets else None, cache_dir=opt.cache_dir,
                                      progress=opt.progress, traces=opt.traces, device=opt.device)
    return rows, title, False


def database_device(meta: dict, paths: list[Path], device: str | None) -> tuple[str, dict]:
    """``(device id, manifest)`` to load a bare JSONDatabase with, so that a checkpoint with
    a device table predicts for the device it was measured on.

    The device is ``device`` when given; else the one device of the checkpoint whose id
    is a folder name in ``paths`` (``datasets/tuning/<device id>/...``); else the device
    described above the paths (a ``device.json``, which ``cdmpp bench tune`` writes, or a
    dataset folder's ``manifest.json``); else this machine.  A device the checkpoint does not know is scored zero-shot from its
    descriptor (``manifest["device"]``): the one found above the paths, or this machine's.

    Raises:
        UnknownDeviceError: ``device`` is neither known to the checkpoint nor this machine;
            or a path names a device folder (``cpu-...``, ``gpu-...``) that is neither
            known to the checkpoint nor this machine, and nothing above the paths describes it.
    """
    from cdmpp.device import local_cpu  # noqa: PLC0415  (keeps the CPU probe off this module's import)

    known = [d.device_id for d in checkpoint_meta(meta).devices]
    if device is None:
        named = {part for p in paths for part in Path(p).resolve().parts if part in known}
        if len(named) == 1:
            return named.pop(), {}
    described = {json.dumps(d, sort_keys=True) for d in map(_described_device, paths) if d is not None}
    desc = DeviceDescriptor.from_json(json.loads(described.pop())) if len(described) == 1 else None
    if desc is not None and device in (None, desc.device_id):
        return desc.device_id, {} if desc.device_id in known else {"device": desc.to_json()}
    if device is not None and device in known:
        return device, {}
    here = local_cpu()
    if device is None and known:
        folders = {part for p in paths for part in Path(p).resolve().parts
                   if part.startswith(("cpu-", "gpu-")) and part != here.device_id}
        if folders:
            raise UnknownDeviceError(f"{', '.join(sorted(folders))}: a device folder that this checkpoint does not "
                                     f"know (it knows {', '.join(known) or 'none'}), that is not this machine "
                                     f"({here.device_id}), and that holds no device.json or manifest.json "
                                     f"to describe it: give --device, or score it on that machine")
    if device is None or device == here.device_id:
        return here.device_id, {"device": here.to_json()}
    if not known:
        return device, {}
    raise UnknownDeviceError(f"device {device!r} is not in this checkpoint (it knows {', '.join(known)}) and is not "
                             f"this machine ({here.device_id}), so it cannot be scored zero-shot")


def _described_device(path: Path) -> dict | None:
    """The device descriptor (JSON) nearest above ``path``: a ``device.json`` (``cdmpp bench
    tune``'s) or a dataset device folder's ``manifest.json``; ``None`` if there is none."""
    for folder in [Path(path).resolve(), *Path(path).resolve().parents]:
        if (folder / DEVICE_FILE).is_file():
            return json.loads((folder / DEVICE_FILE).read_text())
        if (folder / ds.MANIFEST_FILE).is_file():
            found = ds.manifest_of(folder).device
            if found:
                return found
    return None


TUNED_ALL = "all tasks"
"""The row of :func:`evaluate_tuned` over every task (each metric averaged over tasks)."""


def tuning_work_dirs(folders: list[Path]) -> list[Path]:
    """Every MetaSchedule work dir under ``folders`` (a folder holding
    ``database_tuning_record.json``, plain or gzipped), sorted.

    Raises:
        InputError: a folder does not exist or holds no work dir.
    """
    runs = set()
    for folder in folders:
        if not Path(folder).is_dir():
            raise InputError(f"{folder}: no such folder")
        found = {rec.parent for pat in (ds.RECORD_FILE, ds.RECORD_FILE + ".gz") for rec in Path(folder).rglob(pat)}
        if not found:
            raise InputError(f"{folder} holds no MetaSchedule work dir (no {ds.RECORD_FILE}[.gz] below it)")
        runs |= found
    return sorted(runs)


def _task_label(run: Path) -> str:
    """A task's name from a tuning run's path: the ``NN-<task>`` folder of ``cdmpp bench tune``
    (with its network folder), else the work dir's own name."""
    parts = run.parts
    for i in range(len(parts) - 1, -1, -1):
        head, _, name = parts[i].partition("-")
        if head.isdigit() and name:
            net = parts[i - 1] if i and "-b" in parts[i - 1] else ""
            return f"{net} {name.split('_subtract')[0]}".strip()
    return run.name


def evaluate_tuned(checkpoint: Path, folders: list[Path], options: EvaluateOptions | None = None
                   ) -> tuple[dict[str, dict[str, dict]], str]:
    """Score a checkpoint on tuned sets: every trial of the tuning runs under ``folders``
    (MetaSchedule work dirs, e.g. ``cdmpp bench tune`` outputs), pooled per task (a
    task's runs share its workload), so that each task's fastest programs are the ones
    a tuner found.

    Each program is read with its own schedule trace (unless ``options.traces`` is
    off) and predicted for the device the runs were measured on
    (:func:`database_device`).

    Returns:
        ``(rows, title)``: ``rows[task][model]`` is a :func:`~cdmpp.train.metrics.summary`
        row of the task's programs, and ``rows["all tasks"][model]`` the row over every
        task (per-task measures averaged over tasks; ``best_ratio`` their median).

    Raises:
        InputError: a folder holds no work dir.
        CheckpointError, DatasetError, UnknownDeviceError: a bad checkpoint, bad records,
            a device that cannot be scored.
    """
    opt = options or EvaluateOptions()
    runs = tuning_work_dirs(folders)
    model, meta = load_checkpoint(checkpoint)
    predictor = LatencyPredictor(model, meta)
    tree = TreeBaseline.load(Path(checkpoint) / BASELINE_FILE) if (Path(checkpoint) / BASELINE_FILE).exists() else None
    device_id, manifest = database_device(meta, runs, opt.device)
    pooled: dict[str, dict] = {}  # workload key -> label, runs, and each model's predictions
    note = ""
    for run in runs:
        wl, rec = ds.database_files(run)
        db, data = _database_inputs(model, wl, rec, device_id, manifest, opt.cache_dir, False, opt.traces)
        data, note = _for_device(predictor, db, data)
        index = np.arange(len(data))
        preds = {"cdmpp transformer": predictor.predict_featurized(data, index)}
        if tree is not None:
            preds["xgboost PerStoreFeature"] = tree.predict(data.psf_sum[index])
        for w in np.unique(data.workload):
            at = data.workload == w
            entry = pooled.setdefault(data.workload_keys[w], {"label": _task_label(run), "runs": 0, "true": [],
                                                              "pred": {m: [] for m in preds}})
            entry["runs"] += 1
            entry["true"].append(data.latency[at])
            for m, p in preds.items():
                entry["pred"][m].append(np.asarray(p)[at])
    rows: dict[str, dict[str, dict]] = {}
    every_true, every_pred, groups = [], {}, []
    for g, entry in enumerate(pooled.values()):
        true = np.concatenate(entry["true"])
        label = entry["label"] if entry["label"] not in rows else f"{entry['label']} ({g})"
        rows[label] = {}
        for m, parts in entry["pred"].items():
            pred = np.concatenate(parts)
            rows[label][m] = {**summary(pred, true, np.zeros(true.size, np.int64)), "runs": entry["runs"]}
            every_pred.setdefault(m, []).append(pred)
        every_true.append(true)
        groups.append(np.full(true.size, g, np.int64))
    if len(pooled) > 1:
        true, group = np.concatenate(every_true), np.concatenate(groups)
        rows[TUNED_ALL] = {m: {**summary(np.concatenate(p), true, group), "runs": len(runs)}
                           for m, p in every_pred.items()}
    title = (f"tuned sets: {len(runs)} tuning runs of {len(pooled)} tasks under {', '.join(map(str, folders))}, "
             f"predicted for {device_id}" + ("" if opt.traces or not model.config.trace_tokens
                                             else ", without their traces") + note)
    return rows, title


def _database_inputs(model, workload_db: Path, record_db: Path, device_id: str, manifest: dict,
                     cache_dir: Path | None, progress: bool, traces: bool):
    """``(DeviceDatabase, FeaturizedPrograms)`` of a bare JSONDatabase in ``model``'s input
    columns: its loops among the leaves (a loop-token model), and each record's own trace
    as a token (a trace-token model; none with ``traces=False``)."""
    db = ds.load_database(workload_db, record_db, device_id, manifest)
    data = featurize_database(db, cache_dir, progress=progress, loops=model.config.loop_tokens)
    if model.config.trace_tokens and not traces:  # bare PrimFuncs: the loops (if any) and no trace token
        return db, model_inputs(model.config, data, None, traces=False)
    if model.config.loop_tokens:
        data = with_loop_tokens(data)
    if model.config.trace_tokens:
        data = with_trace_tokens(data, lined_up([database_traces(workload_db, record_db)], data.latency))
    return db, data


def _for_device(predictor: LatencyPredictor, db, data: FeaturizedPrograms) -> tuple[FeaturizedPrograms, str]:
    """``(data, note)``: ``data`` with every program at the device-table row of ``db``'s
    device (:meth:`LatencyPredictor.device_row`: its own row when the checkpoint knows
    it, else a zero-shot row from the descriptor the folder records, else the unknown row
    0).  ``note`` is a title suffix naming how an unknown device is scored ('' for a
    known one)."""
    if predictor.model.config.num_devices <= 0:
        return data, ""
    note = ""
    if db.device_id in predictor.devices:
        row = predictor.device_row(db.device_id)
    elif db.manifest.get("device"):
        row = predictor.device_row(DeviceDescriptor.from_json(db.manifest["device"]))
        note = f"; device {db.device_id} is not in this checkpoint: zero-shot from its descriptor"
    else:
        row = 0
        note = f"; device {db.device_id} is not in this checkpoint: the unknown-device row"
    return dataclasses.replace(data, device_row=np.full(len(data), row, dtype=np.int64)), note


def sweep_entry_errors(checkpoint: Path, device_dir: Path, cache_dir: Path | None = None,
                       progress: bool = True) -> dict[str, float]:
    """How far off a checkpoint places each operator-sweep entry of a device folder
    (:mod:`cdmpp.networks.sweep`): per entry, the mean over its measured untunable tasks
    (one program measured) of ``|log(predicted / measured)|``, natural log, cold labels,
    each program read with its schedule trace.  The input of the sweep's second pass
    (:func:`cdmpp.networks.sweep.refine_names`).

    Returns:
        entry name -> mean absolute log ratio; an entry with no measured untunable task is
        left out.

    Raises:
        CheckpointError, DatasetError: a bad checkpoint, or a folder that is not one device's.
        InputError: the folder holds no measured sweep entry.
    """
    from cdmpp.networks.sweep import PREFIX  # noqa: PLC0415  (keeps torch off this module's import)

    model, meta = load_checkpoint(checkpoint)
    predictor = LatencyPredictor(model, meta)
    db, data = load_featurized(Path(device_dir), cache_dir, progress, loops=model.config.loop_tokens)
    data = model_inputs(model.config, data, ds.device_dirs(Path(device_dir))[:1], True)
    data, _ = _for_device(predictor, db, data)
    entries = {n: keys for n, keys in networks_of(db.manifest).items() if n.startswith(PREFIX)}
    index_of = {k: i for i, k in enumerate(data.workload_keys)}
    counts = np.bincount(data.workload, minlength=len(data.workload_keys))
    one = {w: int(np.flatnonzero(data.workload == w)[0])
           for w in {index_of[k] for keys in entries.values() for k in keys if k in index_of} if counts[w] == 1}
    if not one:
        raise InputError(f"{device_dir} holds no measured untunable task of the operator sweep")
    programs = np.array(sorted(one.values()), dtype=np.int64)
    ratio = np.abs(np.log(predictor.predict_featurized(data, programs)) - np.log(data.latency[programs]))
    error = dict(zip(programs.tolist(), ratio.tolist()))
    out = {}
    for name, keys in entries.items():
        levels = [error[one[index_of[k]]] for k in keys if k in index_of and index_of[k] in one]
        if levels:
            out[name] = float(np.mean(levels))
    return out


def network_program_counts(db) -> dict[str, int]:
    """Measured programs of each network of a device folder (a task shared by networks counts in each)."""
    nets: dict[str, int] = {}
    index_of = {k: i for i, k in enumerate(db.workload_keys)}
    counts = np.bincount([p.workload_index for p in db.programs], minlength=len(db.workload_keys))
    for t in tasks_of(db.manifest):
        i = index_of.get(t.workload_key)
        if i is not None:
            nets[t.network] = nets.get(t.network, 0) + int(counts[i])
    return nets
