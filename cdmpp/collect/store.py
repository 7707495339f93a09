"""A device folder's records: the append-only JSONDatabase store, the manifest and the per-task bookkeeping."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from .. import dataset as ds
from ..device import DeviceDescriptor
from ..records import read_records, read_workload_keys, read_workload_lines
from ..tasks import Task
from .config import INPUT_FILL, SAMPLING_POLICY, TUNED_POLICY, CollectConfig


def known_tasks(manifest: dict, device_dir: Path) -> dict[str, list[Task]]:
    """Task lists of networks already extracted into this device folder (no Relax import needed).

    A network counts only when the manifest lists all of its tasks and each task's workload
    is in the workload file; anything else is extracted again.
    """
    counts = {n: v.get("tasks", 0) for n, v in manifest.get("networks", {}).items()}
    if not counts or ds.resolve(device_dir / ds.WORKLOAD_FILE) is None:
        return {}
    from ..tvm_compat import Workload  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    mods = {key: obj for _, key, obj in read_workload_lines(ds.resolve(device_dir / ds.WORKLOAD_FILE))}
    out: dict[str, list[Task]] = {}
    for t in manifest.get("tasks", []):
        if t["network"] in counts and t.get("workload_key") in mods:
            out.setdefault(t["network"], []).append(t)
    tasks = {}
    for n, entries in out.items():
        if len(entries) == counts[n]:
            tasks[n] = [
                Task(e["task_name"], e["weight"], Workload.from_json(mods[e["workload_key"]]).mod, network=n, flops=e["flops"])
                for e in entries
            ]
    return tasks


def program_hash_key(mod) -> str:
    from ..tvm_compat import structural_hash  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    return str(structural_hash(mod))


def task_seed_of(seed: int, workload_key: str, measured: int = 0) -> int:
    """The sampling seed of a task: from the base seed, its workload key and its programs measured so far.

    A first visit (``measured == 0``) keeps the seed it always had. A later round (a
    larger ``programs_per_task``, or a resumed task) gets another seed, so that its
    sampler draws new programs instead of replaying the ones already measured; a replay
    fills whole rounds with duplicates, which reads as a used-up design space.
    """
    return (seed * 1_000_003 + int(workload_key) % 2_147_483_629 + 7_919 * measured) % 2_147_483_647


class DatasetStore:
    """Append-only files of one device folder, and what they already hold."""

    def __init__(self, device_dir: Path):
        from ..tvm_compat import JSONDatabase  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        self.dir = device_dir
        device_dir.mkdir(parents=True, exist_ok=True)
        for name in (ds.WORKLOAD_FILE, ds.RECORD_FILE, ds.WARM_RECORD_FILE, ds.FAILURE_FILE):
            ds.unpack(device_dir / name)  # continue a shipped dataset
            ds.repair_jsonl(device_dir / name)
        self.db = JSONDatabase(
            str(device_dir / ds.WORKLOAD_FILE), str(device_dir / ds.RECORD_FILE), allow_missing=True
        )
        keys = read_workload_keys(device_dir / ds.WORKLOAD_FILE)
        self.workload_index = {k: i for i, k in enumerate(keys)}  # line of each workload in the workload file
        self.done: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        for rec in read_records(device_dir / ds.RECORD_FILE, n_workloads=len(keys)):
            k = keys[rec.workload_index]
            self.done[k] = self.done.get(k, 0) + 1
        self.failed_keys: dict[str, set[str]] = {}
        self._program_keys: dict[str, set[str]] = {}  # measured_program_keys by workload key
        if (device_dir / ds.FAILURE_FILE).exists():
            for _, obj in ds.iter_json_lines(device_dir / ds.FAILURE_FILE):
                self.failed[obj["workload_key"]] = self.failed.get(obj["workload_key"], 0) + 1
                self.failed_keys.setdefault(obj["workload_key"], set()).add(obj["program_key"])

    def workload(self, mod):
        wl = self.db.commit_workload(mod)
        key = str(wl.as_json()[0])
        self.workload_index.setdefault(key, len(self.workload_index))  # a new workload is the file's next line
        return wl, key

    def add_warm_record(self, record, workload_key: str) -> None:
        """Append a record timed with the warm protocol to :data:`cdmpp.dataset.WARM_RECORD_FILE`,
        in the JSONDatabase's own line format (workload index, record), flushed at once."""
        line = json.dumps([self.workload_index[workload_key], record.as_json()])
        with open(self.dir / ds.WARM_RECORD_FILE, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def measured_program_keys(self, workload, workload_key: str | None = None) -> set[str]:
        """Structural hashes of this workload's measured programs (rebuilt from their traces).

        With ``workload_key``, the first call replays the traces and later calls return
        that set kept up to date by :meth:`add_record` (a task visited in every round of a
        long run no longer replays all its measured programs at each visit).  Returns a
        new set the caller may change."""
        from ..tvm_compat import Schedule  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        if workload_key is not None and workload_key in self._program_keys:
            return set(self._program_keys[workload_key])
        keys = set()
        for rec in self.db.get_top_k(workload, 1 << 30):
            sch = Schedule(workload.mod)
            rec.trace.apply_to_schedule(sch, remove_postproc=False)
            keys.add(program_hash_key(sch.mod))
        if workload_key is not None:
            self._program_keys[workload_key] = set(keys)
        return keys

    def add_record(self, record, workload_key: str, program_key: str | None = None) -> None:
        """Commit a measured tuning record (flushed at once by the JSONDatabase); ``program_key``
        (its structural hash) joins the workload's kept :meth:`measured_program_keys`."""
        self.db.commit_tuning_record(record)
        self.done[workload_key] = self.done.get(workload_key, 0) + 1
        if workload_key in self._program_keys:
            if program_key is None:  # unknown: replay the traces again at the next call
                del self._program_keys[workload_key]
            else:
                self._program_keys[workload_key].add(program_key)

    def add_failure(self, task: Task, program_key: str, stage: str, error: str, record) -> None:
        """Append a failed build/run: the tuning record (``run_secs`` null) with its error."""
        line = {
            "workload_key": task.workload_key,
            "network": task.network,
            "task_name": task.name,
            "program_key": program_key,
            "stage": stage,
            "error": error[:4000],
            "record": record.as_json(),
            "time": time.time(),
        }
        with open(self.dir / ds.FAILURE_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.failed[task.workload_key] = self.failed.get(task.workload_key, 0) + 1
        self.failed_keys.setdefault(task.workload_key, set()).add(program_key)


def build_manifest(device: DeviceDescriptor, cfg: CollectConfig, old: dict, tasks: list[Task]) -> dict:
    from ..networks import family_of  # noqa: PLC0415  (keeps torch off this module's import)
    from ..tvm_compat import tvm_version  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    entries = {(t["network"], t["task_name"]): t for t in old.get("tasks", [])}
    for t in tasks:
        entries[(t.network, t.name)] = {
            **entries.get((t.network, t.name), {}),
            "network": t.network,
            "task_name": t.name,
            "weight": t.weight,
            "flops": t.flops,
            "workload_key": t.workload_key,
        }
    runs = old.get("collections", [])
    networks = dict(old.get("networks", {}))
    for t in tasks:  # a network's task list is complete once extracted: a restart reuses it
        networks.setdefault(t.network, {"tasks": 0})
    for n in networks:
        if any(t.network == n for t in tasks):
            note = cfg.network_notes.get(n, networks[n].get("chosen_by"))
            networks[n] = {"tasks": len({t.name for t in tasks if t.network == n}), "family": family_of(n),
                           **({"chosen_by": note} if note else {})}
    return {
        "format": "cdmpp-dataset/1",
        "device": device.to_json(),
        "tvm_version": tvm_version(),
        "measurement": asdict(cfg.measure),
        "label": "median of run_secs (seconds); every repeat is kept in run_secs",
        "inputs": INPUT_FILL,
        "sampling": {
            "policy": SAMPLING_POLICY,
            "seed": cfg.seed,
            "programs_per_task": cfg.goals[-1],
            "evolutionary_fraction": cfg.evolutionary_fraction,
            # a folder that ever had a tuned phase keeps its policy text (each collection's settings: "tuned")
            **({"tuned_policy": TUNED_POLICY} if cfg.tuned_tasks or "tuned_policy" in old.get("sampling", {}) else {}),
        },
        "collections": runs,
        "networks": networks,
        "tasks": list(entries.values()),
    }


def mark_tasks(manifest: dict, device_dir: Path, workload_key: str, field_name: str, value, overwrite: bool) -> None:
    """Set ``field_name`` on every manifest task of the workload (once unless ``overwrite``), then save."""
    changed = False
    for t in manifest["tasks"]:
        if t.get("workload_key") == workload_key and (overwrite or field_name not in t):
            t[field_name] = value
            changed = True
    if changed:
        ds.write_manifest(device_dir, manifest)


def mark_phase(manifest: dict, device_dir: Path, task: Task, programs: int, field_name: str = "random_programs"
               ) -> None:
    """Record, once and before it measures anything, where a task's evolutionary phase
    begins (``random_programs``) or its tuned phase (``tuned_from``): the count of its
    records measured before."""
    for t in manifest["tasks"]:
        if t["network"] == task.network and t["task_name"] == task.name and field_name not in t:
            t[field_name] = programs
            ds.write_manifest(device_dir, manifest)
