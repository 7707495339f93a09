"""The collection loop: every task of every network, round after round, two tasks in flight."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

from tqdm import tqdm

from cdmpp.errors import InputError

from .. import dataset as ds
from ..card import card
from ..device import DeviceDescriptor, DeviceUnavailableError, local_cpu, local_gpu
from ..held_out import held_out_keys
from ..tasks import Task
from .config import CollectConfig, CollectSummary, MachineBusyError
from .machine import PooledBuilder, StageClock, log_note, scratch_folder
from .sampling import (
    make_tune_context,
    networks_tasks,
    plan_tasks,
    round_robin,
    sampling_threads,
    skipped_workloads,
    tuned_task_keys,
)
from .store import (
    DatasetStore,
    build_manifest,
    mark_phase,
    mark_tasks,
    program_hash_key,
    task_seed_of,
)
from .timing import finish_batch, make_bench, submit_batch
from .vm_call import measure_vm_call


class _Collection:
    """One ``collect`` call: its store, manifest, bench and counts; visits tasks one by one."""

    def __init__(self, cfg, device, device_dir, store, manifest, bench, workloads, should_stop, progress=True,
                 guide=None):
        self.cfg, self.device, self.dir, self.progress, self.guide = cfg, device, device_dir, progress, guide
        self.store, self.manifest, self.bench, self.workloads = store, manifest, bench, workloads
        self.should_stop = should_stop
        self.measured = self.failed = self.dups = self.task_errors = 0
        self.stopped = False
        self.bar = None
        self._last_pack = time.time()
        self._models: dict[str, object] = {}  # each task's cost model, by phase and workload key
        self.tuned_keys: set[str] = set()  # the tuned phase's workloads (CollectConfig.tuned_tasks)

    def task_goal(self, key: str, goal: int) -> int:
        """Programs wanted of a task in the round towards ``goal``: ``goal``, plus the tuned
        phase's ``tuned_programs`` for a tuned task in the last round."""
        last = goal == self.cfg.goals[-1]
        return goal + (self.cfg.tuned_programs if last and key in self.tuned_keys else 0)

    def stop_requested(self) -> bool:
        return self.should_stop is not None and bool(self.should_stop())

    def exhausted(self, key: str) -> bool:
        """Whether an earlier visit found this workload's design space used up."""
        return any(t.get("workload_key") == key and "space_exhausted_at" in t for t in self.manifest["tasks"])

    def visit(self, task: Task, goal: int):
        """Sample, measure and record programs of one task until it has ``goal`` (or its space runs out).

        A generator: it yields each batch of fresh ``(candidate, program_key)`` pairs to
        measure and is sent back their :func:`finish_batch` results, so that
        :meth:`run_round` can build one task's batch while another task samples."""
        key, wl, cfg = task.workload_key, self.workloads[task.workload_key], self.cfg
        full = self.task_goal(key, goal)  # goal, plus the tuned phase's programs
        need = full - self.store.done.get(key, 0)
        self.bar.set_postfix_str(f"{task.network}:{task.name}"[:40])
        earlier_failures = self.store.failed.get(key, 0) if cfg.retry_failed else 0
        with self.bench.clock.stage("de-duplication"):
            seen = (set() if cfg.retry_failed else set(self.store.failed_keys.get(key, set()))) | (
                self.store.measured_program_keys(wl, key) if self.store.done.get(key) else set()
            )
        n_random = goal - round(goal * cfg.evolutionary_fraction)
        seed = task_seed_of(cfg.seed, key, self.store.done.get(key, 0))
        for phase in ("random", "evolutionary", "tuned"):
            if need <= 0 or self.stop_requested():
                break
            done = self.store.done.get(key, 0)
            if phase == "random":
                want = min(need, n_random - done)
                if want <= 0:
                    continue
            elif phase == "evolutionary":
                want = min(need, goal - done)
                if want <= 0:
                    continue
                if not done or cfg.evolutionary_fraction <= 0:  # random only, or nothing to learn from
                    if full == goal or not done:
                        break
                    continue  # a tuned task short of its random goal: its tuned phase fills it
                mark_phase(self.manifest, self.dir, task, done)
            else:
                if full == goal or not done:  # not a tuned task here, or nothing to learn from
                    break
                want = need
                mark_phase(self.manifest, self.dir, task, done, "tuned_from")
            if (yield from self._phase(task, wl, phase, want, seen, seed, full, earlier_failures)):
                mark_tasks(self.manifest, self.dir, key, "space_exhausted_at", self.store.done.get(key, 0), True)
                break
            need = full - self.store.done.get(key, 0)
        if need > 0 and not self.stop_requested():  # the design space ran out of distinct programs
            self.bar.total -= need
            self.bar.refresh()

    def _phase(self, task, wl, phase, want, seen, seed, goal, earlier_failures):
        """One sampling phase of a task, a generator as :meth:`visit`; returns whether a whole
        batch was already seen (space used up)."""
        from ..tvm_compat import TuningRecord, ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        cfg, key, clock = self.cfg, task.workload_key, self.bench.clock
        sampling = "random sampling" if phase == "random" else "evolutionary search"
        population = cfg.tuned_population if phase == "tuned" else cfg.evolutionary_population
        model_key = f"{phase}:{key}"
        with clock.stage("cost model training" if phase != "random" else sampling):
            ctx, cost_model = make_tune_context(
                task, self.bench.target, self.device, phase, seed, self.store, wl, population,
                self._models.get(model_key), clock, sampling_threads(self.device.cores, cfg.tasks_in_flight),
                self.guide if phase == "tuned" else None,
            )
        if cost_model is not None:  # it learns each batch timed below; later rounds of this run reuse it
            self._models[model_key] = cost_model
        with clock.stage(sampling):
            ctx.pre_tuning(
                max_trials=want * 4,
                num_trials_per_iter=cfg.batch_size,
                database=self.store.db if cost_model is not None else None,
                cost_model=cost_model,
            )
        attempts, exhausted = 0, False
        give_up = max(8, goal // 4)  # failures with no success: the task cannot run here
        while want > 0 and attempts < goal * 4 and not self.stop_requested():
            if self.store.failed.get(key, 0) - earlier_failures >= give_up and not self.store.done.get(key):
                break
            with clock.stage(sampling):
                cands = ctx.generate_measure_candidates()
            if not cands:
                break
            attempts += len(cands)
            fresh = self._fresh(cands, seen)
            if not fresh:  # a whole round of programs already seen: the space is used up
                exhausted = True
                break
            batch = yield fresh[:want]
            results = self._record(task, wl, batch, TuningRecord)
            want -= len(results)
            outcome = [results.get(id(c), ms.runner.RunnerResult(None, "not measured")) for c in cands]
            with clock.stage(sampling):
                ctx.notify_runner_results(cands, outcome)
            if cost_model is not None and results:  # only what was timed in this batch
                with clock.stage("cost model training"):
                    timed = [c for c in cands if id(c) in results]
                    cost_model.update(ctx, timed, [results[id(c)] for c in timed])
        with clock.stage(sampling):
            ctx.post_tuning()
        return exhausted

    def _fresh(self, cands: list, seen: set) -> list:
        """The candidates not measured (or failed) before, with their program keys."""
        fresh = []
        with self.bench.clock.stage("de-duplication"):
            for c in cands:
                pk = program_hash_key(c.sch.mod)
                if pk in seen:
                    self.dups += 1
                    continue
                seen.add(pk)
                fresh.append((c, pk))
        return fresh

    def _record(self, task: Task, wl, batch: list, record_type) -> dict:
        """Store a measured batch: records and failures; returns runner results of the successes by candidate id."""
        from ..tvm_compat import ms  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        results = {}
        interrupted = self.stop_requested()
        with self.bench.clock.stage("writing"):
            for c, pk, secs, stage, error in batch:
                record = record_type(c.sch.trace, wl, secs, self.bench.target, c.args_info)
                if secs is None and interrupted:
                    continue  # the stop signal may have killed its worker: measure it again next time
                if secs is None:
                    self.store.add_failure(task, pk, stage, error, record)
                    self.failed += 1
                    continue
                self.store.add_record(record, task.workload_key, pk)
                warm = self.bench.warm_secs.pop(pk, None)
                if warm is not None:
                    self.store.add_warm_record(record_type(c.sch.trace, wl, warm, self.bench.target, c.args_info),
                                               task.workload_key)
                self.measured += 1
                self.bar.update(1)
                results[id(c)] = ms.runner.RunnerResult(secs, None)
        return results

    def task_failed(self, task: Task, err: Exception) -> None:
        """Keep one task's TVM error in the manifest; the collection goes on."""
        self.task_errors += 1
        message = f"{type(err).__name__}: {err}"
        self.manifest["collections"][-1].setdefault("task_errors", []).append(
            {
                "network": task.network,
                "task_name": task.name,
                "workload_key": task.workload_key,
                "error": message[-4000:],
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
        )
        ds.write_manifest(self.dir, self.manifest)
        log_note(
            f"{task.network}:{task.name}: skipped after {message.splitlines()[0][:200]} "
            "(kept in the manifest; the next collection tries it again)"
        )

    def checkpoint(self, final: bool) -> None:
        """Write the manifest's counts, stage times and guard figures so far and, when asked to, the packed files."""
        entry = self.manifest["collections"][-1]
        entry.update({"measured": self.measured, "failed": self.failed, "stage_seconds": self.bench.clock.to_json()})
        if isinstance(self.bench.builder, PooledBuilder):
            entry["build_seconds"] = self.bench.builder.to_json()
        if self.bench.guard is not None:
            entry["quiet_machine"] = self.bench.guard.to_json()
        if final:
            entry.update({"ended": time.strftime("%Y-%m-%dT%H:%M:%S"), "stopped_early": self.stopped})
        ds.write_manifest(self.dir, self.manifest)
        if self.cfg.pack_every_s is not None:
            ds.pack(self.dir)
            if final:  # the dataset card too, counting what the packed files hold
                (self.dir / "README.md").write_text(card(self.dir), encoding="utf-8")

    def maybe_pack(self) -> None:
        """Between tasks (no timing in flight): the periodic checkpoint of ``pack_every_s``."""
        if self.cfg.pack_every_s is not None and time.time() - self._last_pack >= self.cfg.pack_every_s:
            self.checkpoint(final=False)
            self._last_pack = time.time()

    def _advance(self, task: Task, goal: int, steps, measured, inflight: list) -> None:
        """Run one task's visit (``steps``; ``None``: start it) until it asks for its next batch
        (queued for building and appended to ``inflight``) or ends; a TVM error ends only
        that task."""
        try:
            steps = self.visit(task, goal) if steps is None else steps
            fresh = steps.send(measured)
        except StopIteration:
            return
        except MachineBusyError:
            raise  # the machine, not the task: stop, every finished record is stored
        except Exception as err:
            if self.stop_requested():
                raise  # a stop signal that landed inside a TVM callback
            self.task_failed(task, err)
            return
        inflight.append((task, steps, submit_batch(self.bench, fresh)))

    def run_round(self, tasks: list[Task], goal: int) -> None:
        """Visit every task once, towards ``goal`` programs each.

        With ``tasks_in_flight`` 2, two tasks are in flight at a time: while one task's
        batch builds on the worker processes, the other samples its next batch (or records
        its last), and a batch is timed only once its own builds are done, with every build
        worker paused, so that sampling and building overlap but nothing runs beside a
        timing."""

        todo = {}
        for t in tasks:
            # a used-up space still holds the failed programs that retry_failed times again
            if not self.exhausted(t.workload_key) or self.cfg.retry_exhausted or self.cfg.retry_failed:
                todo.setdefault(t.workload_key, t)
        total = sum(self.task_goal(k, goal) for k in todo)
        already = sum(min(self.store.done.get(k, 0), self.task_goal(k, goal)) for k in todo)
        desc = f"{self.device.device_id} to {goal}/task"
        self.bar = tqdm(total=total, initial=already, disable=not self.progress, unit="prog", desc=desc, smoothing=0.05)
        waiting = iter(todo.items())
        inflight: list = []
        try:
            while not self.stop_requested():
                while len(inflight) < self.cfg.tasks_in_flight and not self.stop_requested():
                    nxt = next(((k, t) for k, t in waiting if self.task_goal(k, goal) - self.store.done.get(k, 0) > 0),
                               None)
                    if nxt is None:
                        break
                    self.maybe_pack()
                    self._advance(nxt[1], goal, None, None, inflight)
                if not inflight or self.stop_requested():
                    break
                task, steps, submitted = inflight.pop(0)
                self._advance(task, goal, steps, finish_batch(self.bench, submitted), inflight)
        finally:
            for _, steps, _ in inflight:  # batches not timed: their programs are sampled again next time
                steps.close()
            self.bar.close()
            # also when a stop signal ends the round with an exception (one landing in a TVM call)
            self.stopped = self.stop_requested()


def collect(
    cfg: CollectConfig, progress: bool = True, should_stop: Callable[[], bool] | None = None,
    guide: Callable[[DeviceDescriptor], object] | None = None,
) -> CollectSummary:
    """Measure programs of the given networks' tasks on the local CPU; resumable.

    Args:
        cfg: what to collect and how to measure it.
        guide: with ``cfg.tuned_guide == "cdmpp"``, the tuned phase's cost model for a
            device, a MetaSchedule cost model (the plugin's:
            :meth:`cdmpp.tuning.cost_model.CdmppCostModel.guide`); the collector imports
            nothing of the tuner.
        progress: show a progress bar with an ETA on stderr.
        should_stop: polled between measurement batches; when it returns True the
            collection ends after the batch in flight, with every finished record stored
            (``cdmpp collect`` sets it on the first Ctrl-C).

    Returns:
        Counts of what this call added (``stopped`` tells whether ``should_stop`` ended
        it), and the wall seconds of each stage (``stage_seconds``).

    Raises:
        KeyError: an unknown network name.
        InputError: ``cfg.evolutionary_fraction`` above 0 without the xgboost package,
            ``cfg.tasks_in_flight`` other than 1 or 2, or ``tuned_guide="cdmpp"`` without a
            ``guide`` (nothing is written).
        DeviceUnavailableError: ``cfg.gpu`` and no CUDA GPU, or no CUDA compiler (nvcc or
            NVRTC), on this host (nothing is written).
        MachineBusyError: the quiet-machine guard waited longer than ``cfg.quiet.max_wait_s``
            (every record finished before is stored).
    """

    from .. import networks as zoo  # noqa: PLC0415  (keeps torch off this module's import)
    from ..tvm_compat import Target, configure_cuda_compiler, load_tensor_intrinsics  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    for n in cfg.networks:
        zoo.get_network(n)  # fail early on a bad name
    if cfg.tasks_in_flight not in (1, 2):
        raise InputError(f"tasks_in_flight must be 1 or 2, got {cfg.tasks_in_flight}")
    if cfg.tuned_tasks and cfg.tuned_guide == "cdmpp" and guide is None:
        raise InputError("tuned_guide 'cdmpp' needs the plugin as guide= "
                         "(cdmpp.tuning.cost_model.CdmppCostModel.guide(checkpoint))")
    if cfg.evolutionary_fraction > 0 and importlib.util.find_spec("xgboost") is None:
        # else every task fails at its first evolutionary batch (a GPU host without xgboost did)
        raise InputError(
            f"evolutionary_fraction {cfg.evolutionary_fraction} needs the xgboost package (MetaSchedule's XGBModel "
            "guides the evolutionary phase), which this Python lacks: install it, or collect random samples only "
            "(--evolutionary-fraction 0)"
        )
    start = time.time()
    compile_mode = None
    if cfg.gpu:
        device = local_gpu(num_cores=cfg.num_cores)  # raises before anything is written
        try:
            compile_mode = configure_cuda_compiler()
        except RuntimeError as err:
            raise DeviceUnavailableError(str(err)) from err
        cfg = replace(cfg, measure=replace(cfg.measure, enable_cpu_cache_flush=False))
    else:
        device = local_cpu(cfg.num_cores, cfg.disable_avx512)
    if not cfg.gpu and cfg.rpc is None:  # the Relax VM's work between kernels, on this CPU
        try:
            per_call, entry = measure_vm_call(Target(device.target))
            device = replace(device, vm_call_s=per_call, vm_entry_s=entry)
        except Exception as err:  # noqa: BLE001  TVM raises its own types; the collection goes on without it
            log_note(f"the time between kernels was not measured: {type(err).__name__}: {str(err).strip()[-200:]}")
    if cfg.rpc is not None:  # the RPC runner's evaluator is MetaSchedule's: every repeat
        cfg = replace(cfg, measure=replace(cfg.measure, adaptive_repeats=None))
    target = Target(device.target)
    device_dir = Path(cfg.out_dir) / device.device_id
    store = DatasetStore(device_dir)
    old_manifest = ds.read_manifest(device_dir)
    # raises before anything is written; a skipped network named in the networks is extracted below
    skipped_workloads(old_manifest, tuple(n for n in cfg.tuned_skip_networks if n not in cfg.networks))
    clock = StageClock()
    plan = plan_tasks(cfg, device_dir, store, target, clock, held_out_keys())
    every, visit, workloads = plan.every, plan.visit, plan.workloads
    for net, err in plan.failed.items():
        log_note(f"{net}: not collected, its export or Relax import failed: {err}")
    skip = skipped_workloads(old_manifest, cfg.tuned_skip_networks, every)
    known_skipped = 0
    if cfg.new_workloads_only:
        others = [d for d in cfg.out_dir.iterdir() if d.is_dir() and d != device_dir]
        known = set().union(*(ds.measured_workload_keys(d) for d in others))
        kept = [t for t in visit if t.workload_key not in known]
        known_skipped = len(visit) - len(kept)
        visit = kept
        log_note(f"new workloads only: {known_skipped} tasks skipped (another device folder measured their workload), "
                 f"{len(visit)} to visit")
    manifest = build_manifest(device, cfg, old_manifest, every)
    if plan.held_out:
        manifest["held_out"] = {"target": str(target), "workloads": plan.held_out}
    manifest["collections"].append(
        {
            "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "networks": cfg.networks,
            "measurement": asdict(cfg.measure),
            "seed": cfg.seed,
            "rounds": list(cfg.goals),
            "evolutionary_population": cfg.evolutionary_population,
            "tasks_in_flight": cfg.tasks_in_flight,
            # runs without this field seeded each task from the base seed and its workload key only
            "task_seed": "base seed, workload key and the task's programs measured before the visit",
            "runner": "local" if cfg.rpc is None else {"rpc": asdict(cfg.rpc)},
            **({"vm_call_s": device.vm_call_s, "vm_entry_s": device.vm_entry_s} if device.vm_call_s else {}),
            **({"tuned": cfg.tuned_json()} if cfg.tuned_tasks else {}),
            # tasks not collected: a held-out test network has their workload
            **({"held_out_tasks": [f"{t.network}:{t.name}" for t in plan.left_out]} if plan.left_out else {}),
            **({"network_errors": plan.failed} if plan.failed else {}),
            # tasks not visited: another device folder of the dataset measured their workload
            **({"new_workloads_only": {"skipped_tasks": known_skipped}} if cfg.new_workloads_only else {}),
        }
    )
    if compile_mode is not None:  # how TVM turned the generated CUDA C into a GPU binary
        manifest["collections"][-1]["cuda_compile_mode"] = compile_mode
    ds.write_manifest(device_dir, manifest)
    with scratch_folder(device_dir / ".tmp") as tmp:  # build artifacts of the worker processes
        load_tensor_intrinsics(target)
        bench = make_bench(cfg, device, target, clock, tmp)
        run = _Collection(cfg, device, device_dir, store, manifest, bench, workloads, should_stop, progress, guide)
        if cfg.tuned_tasks:
            run.tuned_keys = tuned_task_keys(visit, cfg.tuned_tasks, skip)  # of the tasks this run visits
            if cfg.tuned_only:  # the tuned tasks alone, again round-robin over networks
                tuned = [t for t in visit if t.workload_key in run.tuned_keys]
                visit = round_robin(networks_tasks(tuned))
        try:
            for goal in cfg.goals:
                run.run_round(visit, goal)
                if run.stopped:
                    break
        finally:
            try:
                bench.close()
            finally:  # the manifest's end of this collection, even when closing fails
                run.checkpoint(final=True)
    return CollectSummary(
        device.device_id, device_dir, run.measured, run.failed, run.dups, time.time() - start, run.stopped,
        run.task_errors, clock.to_json(),
    )
