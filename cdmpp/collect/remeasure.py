"""Records from elsewhere and records again: import a JSONDatabase, remeasure a sample, measure given programs."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

from tqdm import tqdm

from cdmpp.errors import InputError

from .. import dataset as ds
from ..device import DeviceUnavailableError, local_cpu, local_gpu
from ..tasks import Task
from .config import CollectSummary, MeasureConfig, QuietConfig
from .store import DatasetStore, program_hash_key
from .timing import local_bench, measure_batch


def import_database(workload_db: Path, record_db: Path, device_id: str, out_dir: Path, network: str = "imported") -> int:
    """Add the measured records of any MetaSchedule JSONDatabase to a dataset.

    Records go to ``out_dir/<device_id>/``; programs already there (same structural
    hash) are skipped, so importing twice adds nothing.  Each workload becomes a task
    of ``network`` with weight 1 in the manifest.

    Returns:
        The number of records added.

    Raises:
        DatasetError: missing files or no measured record.
        ValueError: a device id that is not a plain folder name.
    """
    from ..tvm_compat import TuningRecord, estimate_tir_flops, tvm_version  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if not device_id or "/" in device_id or device_id.startswith("."):
        raise InputError(f"device id {device_id!r} must be a plain folder name")
    src = ds.load_database(Path(workload_db), Path(record_db), device_id)
    device_dir = Path(out_dir) / device_id
    store = DatasetStore(device_dir)
    manifest = ds.read_manifest(device_dir)
    tasks = {(t["network"], t["task_name"]): t for t in manifest.get("tasks", [])}
    known: dict[str, set[str]] = {}
    added = 0
    for p in src.programs:
        wl, key = store.workload(p.record.workload.mod)
        if key not in known:
            known[key] = store.measured_program_keys(wl) if store.done.get(key) else set()
            try:
                flops = float(estimate_tir_flops(wl.mod))
            except Exception:
                flops = 0.0
            tasks.setdefault(
                (network, key), {"network": network, "task_name": key, "weight": 1, "flops": flops, "workload_key": key}
            )
        from ..featurize import as_module  # noqa: PLC0415  (only on the branch that needs it)

        pk = program_hash_key(as_module(p.record))
        if pk in known[key]:
            continue
        known[key].add(pk)
        r = p.record
        store.add_record(TuningRecord(r.trace, wl, [float(s) for s in p.run_secs], r.target, r.args_info), key)
        added += 1
    target = src.programs[0].record.target
    manifest.setdefault("format", "cdmpp-dataset/1")
    manifest.setdefault(
        "device",
        {"device_id": device_id, "kind": "imported", "model": device_id, "cores": 0, "isa": "",
         "isa_flags": [], "target": json.loads(str(target)) if target is not None else {}},
    )
    manifest.setdefault("tvm_version", tvm_version())
    manifest.setdefault("imports", []).append(
        {"workload_db": str(workload_db), "record_db": str(record_db), "added": added, "time": time.strftime("%Y-%m-%dT%H:%M:%S")}
    )
    manifest["tasks"] = list(tasks.values())
    ds.write_manifest(device_dir, manifest)
    return added


def remeasure(
    device_dir: Path,
    sample: int = 100,
    seed: int = 0,
    measure: MeasureConfig | None = None,
    progress: bool = True,
    quiet: QuietConfig | None = None,
) -> Path:
    """Time a random sample of a device folder's measured programs again, to measure drift.

    Each program is rebuilt from its tuning record and timed with the same protocol
    (no re-timing of noisy repeats), on this host, which must be the device that
    measured the folder.  One JSON line per program is appended to
    ``remeasured.jsonl``: ``workload_key``, ``program_key``, ``run_secs`` (stored,
    seconds), ``again`` (the new repeats, seconds; empty on failure), ``error`` and
    ``time``.  Programs already re-measured are skipped, so it resumes.  The
    quiet-machine guard (``quiet``, default on) holds every timing batch.

    Returns:
        The path of ``remeasured.jsonl``.

    Raises:
        DatasetError: no measured program.
        ValueError: this host is not the folder's device.
    """


    from ..tvm_compat import (  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)
        Target,
        configure_cuda_compiler,
        program_from_record,
    )

    db = ds.load_device_dir(Path(device_dir))
    if not db.programs:
        raise ds.DatasetError(f"{device_dir}: no measured program to re-measure")
    devices = {d.device_id: d for d in (local_cpu(), local_cpu(disable_avx512=True))}
    if db.device_id.startswith("gpu-"):
        try:
            gpu = local_gpu()
            devices[gpu.device_id] = gpu
        except DeviceUnavailableError:
            pass
    if db.device_id not in devices:
        raise InputError(f"this host is {', '.join(devices)}, not {db.device_id}: it cannot re-measure that folder")
    device = devices[db.device_id]
    target = Target(device.target)
    dev_type = "cuda" if device.kind == "gpu" else "cpu"
    if dev_type == "cuda":
        configure_cuda_compiler()
    # a folder measured before adaptive repeats existed is timed again with every repeat
    m = measure or MeasureConfig(**{"adaptive_repeats": None, **db.manifest.get("measurement", {})})
    out = Path(device_dir) / ds.REMEASURE_FILE
    ds.unpack(out)  # keep the shipped re-measurements: pack rewrites the .gz from this file
    done = {o["program_key"] for _, o in ds.iter_json_lines(out)} if out.exists() else set()
    order = list(range(len(db.programs)))
    random.Random(seed).shuffle(order)
    picked = []
    for i in order[:sample]:
        p = db.programs[i]
        mod = program_from_record(p.record)
        pk = program_hash_key(mod)
        if pk not in done:
            picked.append((p, mod, pk))

    bench = local_bench(replace(m, max_repeat_cv=None), target, dev_type, quiet or QuietConfig())
    bar = tqdm(total=len(picked), disable=not progress, unit="prog", desc="re-measuring")
    for s in range(0, len(picked), 16):
        chunk = picked[s : s + 16]
        fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk) for p, mod, pk in chunk]
        timed = {pk: (secs, err) for _, pk, secs, _, err in measure_batch(bench, fresh)}
        with open(out, "a", encoding="utf-8") as f:
            for p, _, pk in chunk:
                secs, err = timed[pk]
                line = {
                    "workload_key": db.workload_keys[p.workload_index],
                    "program_key": pk,
                    "run_secs": [float(x) for x in p.run_secs],
                    "again": secs or [],
                    "error": err,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
                f.write(json.dumps(line) + "\n")
                f.flush()
        bar.update(len(chunk))
    bar.close()
    bench.close()
    return out


def measure_programs(
    source_dir: Path,
    index,
    out_dir: Path,
    measure: MeasureConfig | None = None,
    disable_avx512: bool = False,
    note: str = "",
    progress: bool = True,
    quiet: QuietConfig | None = None,
) -> CollectSummary:
    """Time chosen programs of a device folder measured elsewhere, on this host.

    For few-shot transfer to this host's CPU (CDMPP, EuroSys 2024, section 5): the
    programs ``index`` of ``source_dir`` (positions in its tuning-record file, as in
    :func:`cdmpp.dataset.load_device_dir`) are rebuilt from their schedule traces,
    built for this host's target on all cores and timed one at a time with the
    collector's protocol.  They go to ``out_dir/<this device id>/`` as tuning records,
    with their tasks (network, task weight, FLOPs) copied from the source manifest.
    Every finished record is stored at once; a failed build or run goes to
    ``failures.jsonl``.  Programs already measured or failed there are skipped, so a
    stopped call resumes.

    Args:
        index: int positions ``(K,)`` of the programs to measure.
        note: how the programs were chosen, recorded in the manifest.
        quiet: the quiet-machine guard (default :class:`QuietConfig`: on).

    Returns:
        Counts of what this call added.

    Raises:
        DatasetError: the source folder has no measured program.
        IndexError: a position outside the source's programs.
    """
    from ..tvm_compat import Target, load_tensor_intrinsics  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    start = time.time()
    src = ds.load_device_dir(Path(source_dir))
    if not src.programs:
        raise ds.DatasetError(f"{source_dir}: no measured program to choose from")
    index = [int(i) for i in index]
    bad = [i for i in index if not 0 <= i < len(src.programs)]
    if bad:
        raise InputError(f"program positions {bad[:5]} are outside the {len(src.programs)} programs of {source_dir}")
    device = local_cpu(disable_avx512=disable_avx512)
    target = Target(device.target)
    m = measure or MeasureConfig()
    device_dir = Path(out_dir) / device.device_id
    store = DatasetStore(device_dir)
    manifest = ds.read_manifest(device_dir)
    todo, tasks = _chosen_programs(src, index, store, manifest)
    manifest = _transfer_manifest(manifest, device, m, tasks, source_dir, len(index), note)
    ds.write_manifest(device_dir, manifest)
    load_tensor_intrinsics(target)
    bench = local_bench(m, target, "cpu", quiet or QuietConfig())
    counts = {"measured": 0, "failed": 0}
    try:
        _time_chosen(bench, todo, src, store, target, counts, progress, device.device_id)
    finally:
        bench.close()
        manifest["collections"][-1].update({"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), **counts})
        ds.write_manifest(device_dir, manifest)
    return CollectSummary(device.device_id, device_dir, counts["measured"], counts["failed"], len(index) - len(todo),
                          time.time() - start)


def _chosen_programs(src, index: list[int], store: DatasetStore, manifest: dict) -> tuple[list, dict]:
    """The chosen programs not yet measured or failed here, as ``(program, workload, key,
    mod, program key)``, and the tasks of every chosen program (keyed by network and name)."""
    from ..tvm_compat import program_from_record  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    src_tasks = src.tasks_by_workload()
    tasks = {(t["network"], t["task_name"]): t for t in manifest.get("tasks", [])}
    todo, seen = [], {}
    for i in index:
        p = src.programs[i]
        wl, key = store.workload(p.record.workload.mod)
        if key not in seen:
            seen[key] = store.failed_keys.get(key, set()) | (
                store.measured_program_keys(wl) if store.done.get(key) else set()
            )
        for t in src_tasks.get(src.workload_keys[p.workload_index], []):
            tasks.setdefault((t.network, t.task_name), {**t.model_dump(exclude_none=True), "workload_key": key})
        mod = program_from_record(p.record)
        pk = program_hash_key(mod)
        if pk in seen[key]:
            continue
        seen[key].add(pk)
        todo.append((p, wl, key, mod, pk))
    return todo, tasks


def _transfer_manifest(old: dict, device, m: MeasureConfig, tasks: dict, source_dir: Path, chosen: int,
                       note: str) -> dict:
    """The target folder's manifest with this call's collection entry opened."""
    from ..tvm_compat import tvm_version  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    networks = dict(old.get("networks", {}))
    for t in tasks.values():
        networks.setdefault(t["network"], {"tasks": 0})
    manifest = {
        "format": "cdmpp-dataset/1",
        "device": device.to_json(),
        "tvm_version": tvm_version(),
        "measurement": asdict(m),
        "label": "median of run_secs (seconds); every repeat is kept in run_secs",
        "sampling": old.get("sampling")
        or {"policy": f"chosen programs of {source_dir}, measured again on this device", "seed": None},
        "collections": old.get("collections", []),
        "networks": networks,
        "tasks": list(tasks.values()),
    }
    manifest["collections"].append(
        {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "source": str(source_dir), "chosen": chosen, "note": note}
    )
    return manifest


def _time_chosen(bench, todo: list, src, store: DatasetStore, target, counts: dict[str, int], progress: bool,
                 desc: str) -> None:
    """Time ``todo`` in chunks of 16 and store each result at once, counting into ``counts``
    (``measured``, ``failed``) as it goes, so that an interrupted call reports what it stored."""


    from ..tvm_compat import TuningRecord  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    src_tasks = src.tasks_by_workload()
    with tqdm(total=len(todo), disable=not progress, unit="prog", desc=desc) as bar:
        for s in range(0, len(todo), 16):
            chunk = todo[s : s + 16]
            fresh = [(SimpleNamespace(sch=SimpleNamespace(mod=mod), args_info=p.record.args_info), pk)
                     for p, _, _, mod, pk in chunk]
            timed = {pk: (secs, stage, err) for _, pk, secs, stage, err in measure_batch(bench, fresh)}
            for p, wl, key, _, pk in chunk:
                secs, stage, err = timed[pk]
                record = TuningRecord(p.record.trace, wl, secs, target, p.record.args_info)
                if secs is None:
                    t = next(iter(src_tasks.get(src.workload_keys[p.workload_index], [])), None)
                    task = Task(t.task_name if t else key, 1, None, network=t.network if t else "?", workload_key=key)
                    store.add_failure(task, pk, stage, err, record)
                    counts["failed"] += 1
                    continue
                store.add_record(record, key)
                counts["measured"] += 1
            bar.update(len(chunk))
