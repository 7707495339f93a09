"""Tasks and their schedules: task extraction, random and evolutionary sampling (MetaSchedule's tune context)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import dataset as ds
from ..device import DeviceDescriptor
from ..errors import InputError
from ..held_out import HELD_OUT_FILE, HELD_OUT_NETWORKS, KEY_TARGETS, held_out_keys
from ..tasks import Task
from .config import CollectConfig
from .machine import StageClock
from .store import DatasetStore, known_tasks, program_hash_key


def extract_network_tasks(network: str, target) -> list[Task]:
    """The MetaSchedule tuning tasks of a zoo network, with weights and FLOPs."""
    from .. import networks as zoo  # noqa: PLC0415  (keeps torch off this module's import)

    return extract_spec_tasks(zoo.get_network(network), target)


def extract_spec_tasks(spec, target) -> list[Task]:
    """The MetaSchedule tuning tasks of a :class:`cdmpp.networks.NetworkSpec` (a zoo entry or
    a network outside the zoo), with weights and FLOPs, in extraction order."""
    from cdmpp.relax_import import relax_module_from_torch  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    from ..tvm_compat import estimate_tir_flops, extract_tasks  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    network = spec.name
    mod = relax_module_from_torch(spec.build(), spec.example_inputs(), target)
    tasks = []
    for t in extract_tasks(mod, target):
        sub = t.dispatched[0]
        try:
            flops = float(estimate_tir_flops(sub))
        except Exception:
            flops = 0.0
        tasks.append(Task(str(t.task_name), int(t.weight), sub, network=network, flops=flops))
    return tasks


def _timed_per_store_feature(clock: StageClock):
    """MetaSchedule's ``PerStoreFeature`` (XGBModel's default features, the same values),
    its time counted as the ``"cost model features"`` stage of ``clock``."""
    from ..tvm_compat import derived_object, ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    @derived_object
    class TimedPerStoreFeature(ms.feature_extractor.PyFeatureExtractor):
        def __init__(self):
            super().__init__()
            self.inner = ms.feature_extractor.PerStoreFeature()

        def extract_from(self, context, candidates):
            with clock.stage("cost model features"):
                return self.inner.extract_from(context, candidates)

    return TimedPerStoreFeature()


def sampling_threads(cores: int, tasks_in_flight: int) -> int:
    """Threads of a task's search (and its XGBoost) while ``tasks_in_flight - 1`` other
    tasks' batches build: every core for one task at a time, else half of them (at least
    one), so that the sampling and the build workers share the cores.

    On 2 cores that is 1 (two sampling threads only spun against the builders: XGBoost
    training went from 1.9 s to 16.1 s); on a 16-core GPU host it is 8 (one thread made
    CUDA random sampling, which rejects most draws in ``VerifyGPUCode``, 9x slower per
    program than 16 threads and 90% of the wall time)."""
    return cores if tasks_in_flight <= 1 else max(1, cores // 2)


def make_tune_context(
    task: Task, target, device: DeviceDescriptor, phase: str, seed: int, store: DatasetStore, workload, population: int,
    cost_model=None, clock: StageClock | None = None, threads: int | None = None,
    guide: Callable[[DeviceDescriptor], object] | None = None,
):
    """A TuneContext for one sampling phase, and the phase's cost model (``None`` for random).

    ``phase``: ``"random"`` (MetaSchedule's ``ReplayTrace``), ``"evolutionary"`` (its
    ``EvolutionarySearch`` with a population of ``population``, as a sampler) or
    ``"tuned"`` (the same search as a tuner runs it: ``population``, TVM's other defaults).
    ``cost_model``: the task's cost model from an earlier visit of this run, which has
    learnt every program of the task measured so far; ``None`` makes a new one and trains
    it on them (replaying each record's trace for its features): MetaSchedule's XGBModel,
    or for the tuned phase ``guide(device)``, a MetaSchedule cost model that the caller
    injects (cdmpp's plugin: :meth:`cdmpp.tuning.cost_model.CdmppCostModel.guide`), so
    that the collector imports nothing of the tuner.  ``threads``: threads of the search and of XGBoost
    (``None``: all cores; see :func:`sampling_threads`)."""
    threads = threads or device.cores
    from ..tvm_compat import ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if phase == "random":
        strategy, cost_model = ms.search_strategy.ReplayTrace(max_fail_count=64), None
    elif phase == "tuned":
        strategy = ms.search_strategy.EvolutionarySearch(population_size=population,
                                                         init_min_unmeasured=min(50, population))
    else:
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=population, init_min_unmeasured=min(32, population // 2)
        )
    fresh_model = phase != "random" and cost_model is None
    if fresh_model and phase == "tuned" and guide is not None:
        cost_model = guide(device)
    elif fresh_model:
        extractor = _timed_per_store_feature(clock) if clock is not None else "per-store-feature"
        cost_model = ms.cost_model.XGBModel(extractor=extractor, num_warmup_samples=0, verbose_eval=1 << 30,
                                            num_tuning_cores=threads)
    ctx = ms.TuneContext(
        task.mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=strategy,
        task_name=task.name,
        rand_state=seed,
        num_threads=threads,
    )
    if fresh_model:  # learn from every program of the task measured so far
        records = store.db.get_top_k(workload, 1 << 30)
        cands = [r.as_measure_candidate() for r in records]
        cost_model.update(ctx, cands, [ms.runner.RunnerResult(r.run_secs, None) for r in records])
    return ctx, cost_model


def tuned_task_keys(every: list[Task], per_network: int, skip: set[str] = frozenset()) -> set[str]:
    """Workload keys of the ``per_network`` largest tasks of each network by task weight x
    FLOPs (the tuned phase's tasks), leaving out the workload keys in ``skip``."""
    keys: set[str] = set()
    for net in dict.fromkeys(t.network for t in every):
        ranked = sorted((t for t in every if t.network == net and t.workload_key not in skip),
                        key=lambda t: -t.weight * t.flops)
        keys |= {t.workload_key for t in ranked[:per_network]}
    return keys


def skipped_workloads(manifest: dict, networks: tuple[str, ...], tasks: list[Task] = ()) -> set[str]:
    """Workload keys of these networks' tasks in a device folder's manifest or in ``tasks``
    (this run's extracted tasks; the tuned phase's :attr:`CollectConfig.tuned_skip_networks`).

    Raises:
        InputError: a network has no tasks in the manifest nor in ``tasks``.
    """
    keys: set[str] = set()
    for net in networks:
        found = {t["workload_key"] for t in manifest.get("tasks", []) if t["network"] == net and t.get("workload_key")}
        found |= {t.workload_key for t in tasks if t.network == net and t.workload_key}
        if not found:
            raise InputError(f"tuned_skip_networks: {net!r} has no tasks in this folder's manifest; collect it "
                             f"first (any number of programs) or name it in the networks, so that its workloads "
                             f"are known")
        keys |= found
    return keys


def held_out_workloads(networks: tuple[str, ...], target, manifest: dict) -> dict[str, list[str]]:
    """Workload keys (structural hashes) of the held-out test networks' tasks for ``target``.

    Read from the manifest's ``held_out`` entry when it lists every network for this
    target, else extracted (:mod:`cdmpp.networks.held_out`; some 30 s on 2 cores).

    Returns:
        ``{network: [workload key, ...]}``; the caller stores it in the manifest as ``held_out``.
    """
    from ..networks.held_out import network_spec  # noqa: PLC0415  (keeps torch and transformers off this module's import)

    cached = manifest.get("held_out", {})
    target_key = str(target)
    if cached.get("target") == target_key and all(n in cached.get("workloads", {}) for n in networks):
        return {n: cached["workloads"][n] for n in networks}
    return {n: sorted({program_hash_key(t.mod) for t in extract_spec_tasks(network_spec(n), target)})
            for n in networks}


@dataclass
class TaskPlan:
    """What a collection visits (:func:`plan_tasks`).

    Attributes:
        every: the tasks of all networks that import, filed under their workloads.
        visit: the tasks to visit, in round-robin order over networks.
        workloads: the JSONDatabase workload of each workload key.
        held_out: the held-out test networks' workload keys, by network.
        left_out: tasks not collected because a held-out network has their workload.
        failed: networks whose export or Relax import failed, with the error.
    """

    every: list[Task]
    visit: list[Task]
    workloads: dict
    held_out: dict[str, list[str]]
    left_out: list[Task]
    failed: dict[str, str]


def plan_tasks(cfg: CollectConfig, device_dir: Path, store: DatasetStore, target, clock: StageClock,
               shipped_held_out: frozenset[str] = frozenset()) -> TaskPlan:
    """Every task of the networks (from the manifest, or extracted), filed under its workload.

    A task whose workload a held-out test network also has (:attr:`CollectConfig.held_out`,
    by structural hash; with ``cfg.held_out``, also any key of ``shipped_held_out``, the
    shipped keys of every import: :func:`cdmpp.held_out.held_out_keys`) is left out: not
    filed, listed or measured.  A network whose
    export or Relax import fails is reported by name (``failed``); the others go on.
    """
    per_network, failed = [], {}
    manifest = ds.read_manifest(device_dir)
    known = known_tasks(manifest, device_dir)
    with clock.stage("task extraction"):
        held = held_out_workloads(cfg.held_out, target, manifest) if cfg.held_out else {}
        for n in cfg.networks:
            try:
                per_network.append(known.get(n) or extract_network_tasks(n, target))
            except Exception as err:  # noqa: BLE001  torch.export and the Relax frontend raise many types
                failed[n] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:500]
    banned = set(itertools.chain.from_iterable(held.values()))
    if cfg.held_out:  # the shipped keys of every import (a manifest caches one import's)
        banned |= shipped_held_out
    left_out = [t for net_tasks in per_network for t in net_tasks if program_hash_key(t.mod) in banned]
    per_network = [[t for t in net_tasks if t not in left_out] for net_tasks in per_network]
    workloads = {}
    with clock.stage("writing"):
        for t in itertools.chain.from_iterable(per_network):  # every task is listed, measured or not
            wl, t.workload_key = store.workload(t.mod)
            workloads[t.workload_key] = wl
            # Structural equality ignores block and buffer names, so tasks of two networks can
            # share one workload whose module names its blocks differently (``lv229_red`` and
            # ``lv239_red``).  Sample on the workload's own module, so that every stored schedule
            # trace replays on the workload it is filed under.
            t.mod = wl.mod
    every = list(itertools.chain.from_iterable(per_network))
    if cfg.max_tasks_per_network is not None:
        per_network = [net_tasks[: cfg.max_tasks_per_network] for net_tasks in per_network]
    return TaskPlan(every, round_robin(per_network), workloads, held, left_out, failed)


def round_robin(per_network: list[list[Task]]) -> list[Task]:
    """The tasks in round-robin order over networks (each network's first task, then each
    one's second, ...), so that a collection stopped early covers every network."""
    return [t for group in itertools.zip_longest(*per_network) for t in group if t is not None]


def networks_tasks(tasks: list[Task]) -> list[list[Task]]:
    """``tasks`` grouped by network, each group in the order of ``tasks``."""
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(t.network, []).append(t)
    return list(groups.values())


def sample_schedules(mod, target, count: int, seed: int = 0) -> list:
    """Uniform random schedules of one task's design space, not measured (the collector's
    random phase: ``ReplayTrace`` over MetaSchedule's post-order-apply space).

    Works for any target TVM can generate code for, so CUDA programs can be sampled,
    featurized and built on a machine without the GPU; only timing them needs it.

    Args:
        mod: the task's workload, an IRModule with one PrimFunc.
        target: TVM ``Target`` (or dict / tag) whose default schedule rules span the space.
        count: schedules wanted; fewer come back when the space has fewer distinct ones.
        seed: random seed of the sampling.

    Returns:
        Up to ``count`` ``Schedule`` objects (``.mod`` the scheduled IRModule, ``.trace``
        its schedule trace); one when the design space has no sampling decision (its only
        program).
    """
    from ..tvm_compat import Target, load_tensor_intrinsics, ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    target = target if isinstance(target, Target) else Target(target)
    load_tensor_intrinsics(target)
    ctx = ms.TuneContext(
        mod,
        target=target,
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(max_fail_count=64),
        task_name="sample",
        rand_state=seed,
        num_threads=1,
    )
    if not has_decisions(ctx.generate_design_space()):
        count = 1  # a design space without a sampling decision holds one program: every draw repeats it
    ctx.pre_tuning(max_trials=count, num_trials_per_iter=count, database=None, cost_model=None)
    cands = ctx.generate_measure_candidates() or []
    ctx.post_tuning()
    return [c.sch for c in cands][:count]


def has_decisions(spaces: list) -> bool:
    """Whether a task's design space (MetaSchedule ``Schedule`` objects, one per sketch) holds
    more than one program: several sketches, or a sampling instruction (``Sample*``) in its trace."""
    return len(spaces) > 1 or any(inst.kind.name.startswith("Sample") for s in spaces for inst in s.trace.insts)


def compute_held_out_file(path: Path = HELD_OUT_FILE) -> dict:
    """Extract the held-out networks' tasks for each of :data:`cdmpp.held_out.KEY_TARGETS` and add their
    workload keys to those already in ``path`` (about a minute on 2 cores); no key is
    dropped.  Returns what it wrote."""
    from ..tvm_compat import Target, tvm_version  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    old = json.loads(Path(path).read_text(encoding="utf-8"))["workloads"] if Path(path).is_file() else {}
    new = {kind: held_out_workloads(HELD_OUT_NETWORKS, Target(t), {}) for kind, t in KEY_TARGETS.items()}
    data = {
        "tvm_version": tvm_version(),
        "networks": list(HELD_OUT_NETWORKS),
        "workloads": {kind: {net: sorted(set(keys) | set(old.get(kind, {}).get(net, [])))
                             for net, keys in by_net.items()} for kind, by_net in new.items()},
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    held_out_keys.cache_clear()
    return data
