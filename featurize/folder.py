"""Featurizing a device folder or a database, with a cache on disk: read as plain JSON where it can be, each trace replayed once, and only the programs new since the cached prefix featurized."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np

from cdmpp import dataset as ds
from cdmpp.records import read_records, read_workload_keys
from cdmpp.schema import tasks_of

from .ast import FEATURE_DIM, FEATURIZER_VERSION, UnsupportedProgramError
from .batch import FeaturizedPrograms, from_trees
from .parallel import featurize_record_lines, featurize_records


def _cache_key(cache_dir: Path, device_id: str, workload_keys: list[str], programs) -> Path:
    """The cache file of a database: a hash of the feature layout and version, the
    workload keys, and each measured program's workload index and repeats
    (``programs``: ``(workload index, float64 run_secs)`` pairs in file order)."""
    h = hashlib.sha256(json.dumps([FEATURE_DIM, FEATURIZER_VERSION, workload_keys]).encode())
    for widx, secs in programs:
        h.update(str(widx).encode())
        h.update(np.asarray(secs, dtype=np.float64).tobytes())
    return Path(cache_dir) / f"featurized-{device_id}-{h.hexdigest()[:16]}.npz"


def measured_repeats(device_dir: Path) -> tuple[list[str], list[tuple[int, np.ndarray]]] | None:
    """``(workload keys, [(workload index, float64 run_secs), ...])`` of a device folder's
    measured records, in file order, read as plain JSON (no TVM objects); the records
    :func:`cdmpp.dataset.load_database` keeps, unless TVM rejects one.  ``None`` when a
    file is missing or a line is not a JSONDatabase line."""

    files = ds.database_files(device_dir, required=False)
    if files is None:
        return None
    wl, rec = files
    try:
        keys = read_workload_keys(wl, [])
        programs = [(widx, arr) for widx, arr, _ in measured_record_lines(rec, len(keys))]
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return keys, programs


def measured_record_lines(record_file: Path, workloads: int):
    """``(workload index, float64 run_secs, record JSON)`` of each measured line of a
    JSONDatabase record file, in file order, read as plain JSON
    (:func:`cdmpp.records.read_records`): the lines :func:`cdmpp.dataset.load_database`
    keeps, unless TVM rejects one (a workload index in ``[0, workloads)``, and a valid
    measurement).

    Raises:
        ValueError: a line is not a JSONDatabase tuning record (raised after the good lines).
    """
    bad: list = []
    for rec in read_records(record_file, bad, measured=True):
        if rec.workload_index < workloads:
            yield rec.workload_index, rec.run_secs, rec.record
    decode = [b for b in bad if b.error.startswith("bad tuning record")]
    if decode:
        raise ValueError(f"{decode[0].path}:{decode[0].lineno}: {decode[0].error}")


def cached_device_folder(device_dir: Path, cache_dir: Path, light=None) -> FeaturizedPrograms | None:
    """The cached featurization of a device folder, found without building TVM objects.

    Reads the folder's JSON lines as plain JSON (seconds for 30,000 records, where
    :func:`cdmpp.dataset.load_device_dir` parses every record into TVM objects for
    minutes) and looks up the key :func:`featurize_database` would use.  A record or
    workload that TVM would reject changes the key, so a miss (``None``) is always safe:
    the caller then loads the folder and featurizes it.  ``light`` is
    :func:`measured_repeats`'s result when the caller has it already.
    """

    device_dir = Path(device_dir)
    light = light if light is not None else measured_repeats(device_dir)
    if light is None:
        return None
    keys, programs = light
    device_id = ds.read_manifest(device_dir).get("device", {}).get("device_id", device_dir.name)
    key = _cache_key(cache_dir, device_id, keys, programs)
    if not key.exists():
        return None
    try:
        return FeaturizedPrograms.load(key)
    except ValueError:
        return None


def featurize_database(db, cache_dir: Path | None = None, progress: bool = False,
                       loops: bool = False, workers: int = 1) -> FeaturizedPrograms:
    """Featurize every measured program of a :class:`cdmpp.dataset.DeviceDatabase`.

    The programs carry TVM's ``PerStoreFeature`` rows too (``psf``, the baselines' input),
    and their loop tokens (``loop_x``); with ``loops``, a cache entry written without the
    loop tokens is not used.
    With ``cache_dir``, the result is cached under a key of the database's content; a
    folder that grew since its last featurization (collections append records) reuses
    that cache entry for its first programs, featurizes only the new ones, and caches the
    grown state beside it.  ``workers`` processes featurize a large database
    (:func:`cdmpp.featurize.parallel.featurize_records`).

    Raises:
        UnsupportedProgramError: a program that cannot be featurized.
    """
    def run(programs, target):
        return featurize_records([p.record for p in programs], target, psf=True, workers=workers, progress=progress)

    return _featurize_programs(db, cache_dir, loops, run)


def featurized_device(device_dir: Path, cache_dir: Path | None = None, progress: bool = False, loops: bool = False,
                      workers: int = 1) -> tuple[ds.DeviceDatabase, FeaturizedPrograms]:
    """:func:`featurize_database` of a device folder (``load_device_dir``), reading its
    records as plain JSON: no ``TuningRecord`` is built in this process, and each
    record's trace is replayed once, in the featurizing processes
    (:func:`cdmpp.featurize.parallel.featurize_record_lines`).  The same programs, in the
    same order, the same features and the same cache entry as :func:`featurize_database`
    of :func:`cdmpp.dataset.load_device_dir`, at about a third of the wall time; a folder
    whose records TVM rejects, or without a recorded device target, goes that way instead.

    Returns:
        ``(database, featurized programs)``: the database as read, its programs those
        featurized, in order (:func:`cdmpp.dataset.load_device_json`, or
        :func:`cdmpp.dataset.load_device_dir` when TVM rejects a record).

    Raises:
        DatasetError: a database file is missing, or the folder holds no measured record.
        UnsupportedProgramError: a program that cannot be featurized.
    """
    device_dir = Path(device_dir)
    light = None
    if ds.database_files(device_dir, required=False) is not None and ds.read_manifest(device_dir).get(
            "device", {}).get("target"):
        try:
            light = ds.load_device_json(device_dir)
        except (ds.DatasetError, TypeError, ValueError, IndexError, KeyError):
            light = None
    if light is not None and not light.bad_lines:

        def run(programs, target):
            return featurize_record_lines(light.workloads, [(p.workload_index, p.record) for p in programs], target,
                                          psf=True, workers=workers, progress=progress)

        try:
            return light, _featurize_programs(light, cache_dir, loops, run)
        except UnsupportedProgramError:
            pass  # a record TVM rejects: the TVM reader skips it, as training always did
    db = ds.load_device_dir(device_dir)
    return db, featurize_database(db, cache_dir, progress, loops, workers)


def featurize_folder(device_dir: Path, cache_dir: Path | None = None, progress: bool = False, loops: bool = False,
                     workers: int = 1) -> tuple[FeaturizedPrograms, list[np.ndarray]]:
    """:func:`featurized_device`, returning ``(featurized programs, each program's float64
    run_secs in seconds)``."""
    db, data = featurized_device(device_dir, cache_dir, progress, loops, workers)
    return data, [p.run_secs for p in db.programs]


def _featurize_programs(db, cache_dir: Path | None, loops: bool, run) -> FeaturizedPrograms:
    """The cache look-up, featurization (``run(programs, target)``: one tree per program)
    and cache write of :func:`featurize_database` and :func:`featurize_folder`."""
    key, prefix = None, None
    if cache_dir is not None:
        key = _cache_key(cache_dir, db.device_id, db.workload_keys, ((p.workload_index, p.run_secs) for p in db.programs))
        if key.exists():
            try:
                cached = FeaturizedPrograms.load(key)
                if cached.has_loops or not loops:
                    return cached
            except ValueError:
                pass  # recompute a corrupt cache entry
        prefix = _cached_prefix(Path(cache_dir), db)
        if prefix is not None and loops and not prefix.has_loops:
            prefix = None
    if db.manifest.get("device"):
        target = db.manifest["device"]["target"]  # the dict: it travels to the featurizing processes
    else:  # a bare JSONDatabase: the target its records were measured for
        target = db.programs[0].record.target if db.programs else None
    flops_of = {}
    for t in tasks_of(db.manifest):
        flops_of[t.workload_key] = t.flops
    done = len(prefix) if prefix is not None else 0
    trees = run(db.programs[done:], target)

    def flops(workload):
        return np.asarray([flops_of.get(db.workload_keys[w], 0.0) for w in workload], dtype=np.float64)

    rest = db.programs[done:]
    workload = [p.workload_index for p in rest]
    out = from_trees(trees, [p.latency for p in rest], workload, db.workload_keys, flops(workload))
    if prefix is not None:  # its workload keys are a prefix of this database's: the indices stay valid
        prefix = dataclasses.replace(prefix, workload_keys=list(db.workload_keys), flops=flops(prefix.workload))
        out = FeaturizedPrograms.concat([prefix, out])
    if key is not None:
        key.parent.mkdir(parents=True, exist_ok=True)
        out.save(key)  # the earlier entry stays: another folder of this device may be that state (the slice)
    return out


def _cached_prefix(cache_dir: Path, db) -> FeaturizedPrograms | None:
    """The longest cached featurization of this device whose programs are the first ones
    of ``db`` (a collection only appends records and workloads, so a grown folder's cache
    entry of an earlier state holds its first programs): same workload keys as far as it
    has any, and the same workload and median latency for each of its programs.
    ``None`` when there is none."""
    pattern = re.compile(rf"featurized-{re.escape(db.device_id)}-[0-9a-f]{{16}}\.npz")
    best: FeaturizedPrograms | None = None
    if not cache_dir.is_dir():
        return best
    workload = latency = None
    for path in cache_dir.iterdir():
        if not pattern.fullmatch(path.name):
            continue
        try:
            cached = FeaturizedPrograms.load(path)
        except ValueError:
            continue
        n = len(cached)
        if n == 0 or n > len(db.programs) or cached.psf is None or (best is not None and n <= len(best)):
            continue
        if cached.workload_keys != list(db.workload_keys[: len(cached.workload_keys)]):
            continue
        if workload is None:
            workload = np.asarray([p.workload_index for p in db.programs], dtype=np.int64)
            latency = np.asarray([p.latency for p in db.programs], dtype=np.float64)
        if np.array_equal(cached.workload, workload[:n]) and np.array_equal(cached.latency, latency[:n]):
            best = cached
    return best
