"""``cdmpp bench truth-check``: whole-network estimates against the network measured end to end.

For each network (a zoo name or ``module.py:function``), on this machine, from one
device folder of measured programs or from one tuning work dir per network (``cdmpp
tune``'s JSONDatabase):

1. the tuning database is each task's fastest measured record in the folder or work dir;
2. the network is compiled with it (``ms.relax_integration.compile_relax``) and run with
   the Relax VM: the **measured end-to-end** latency (median of ``repeat`` runs, after a
   warm-up, no cache flush: back-to-back inference);
3. the **measured sum**: ``sum(task weight * the record's measured latency)`` (each
   record timed alone with a cache flush, as collected), and the **measured warm sum**
   of the same records timed warm (no flush, as inside a network) where the folder
   holds warm timings;
4. the **estimate**: :func:`cdmpp.estimate.estimate_network` with the same database
   (what ``POST /estimate`` returns), with its 10-90% interval, and its in-network
   (warm) total where the checkpoint learned the device's warm protocol;
5. with ``retime``, the **retimed sum**: each task's chosen record built and timed
   again now, with the collector's protocol (cold, one program at a time), times its
   task weight; and the **retimed warm sum**, the same records timed warm (no cache
   flush, back to back, as inside a network). The records' own timings may come from another run of the machine,
   and a cloud VM's speed can differ between runs; the retimed sum is timed in the same
   run as the end-to-end latency, so their ratio compares like with like.

Comparing 2 and 3 shows what summing kernels misses (the VM's own work, operators
outside the tuning tasks, warm caches); comparing 3 and 4 is the model's error on the
same schedules.  Timings wait for a quiet machine (the collector's guard).

With ``--rescore`` (:func:`rescore_truth_check`), stored rows of work-dir runs are
estimated again with another checkpoint and nothing is timed: a checkpoint trained on
any machine is checked against networks measured on a CPU it cannot reach.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from benchmarks import print_and_write_rows, read_truth_check_rows, render_table
from benchmarks.held_out import held_out_network, held_out_networks
from benchmarks.retime import retime_records_both
from cdmpp import dataset as ds
from cdmpp.collect import QuietConfig, QuietGuard
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.estimate import estimate_network, keep_fastest, relax_tasks, work_dir_best
from cdmpp.kernel_class import class_levels, kernel_class
from cdmpp.network_input import RelaxNetwork, load_relax, relax_network
from cdmpp.predictor import LatencyPredictor
from cdmpp.tvm_compat import Target, ms, runs_as_view, structural_hash


@dataclass
class TruthCheckConfig:
    """What ``run_truth_check`` measures.

    Attributes:
        networks: zoo network names, held-out test networks by name, or
            ``module.py:function`` (a function returning ``(torch.nn.Module, tuple of
            example inputs)``; :func:`load_network`).
        repeat: end-to-end runs timed (the median is reported).
        checkpoint: the checkpoint of the estimate (``None``: the shipped one).
        device: the device id the estimate is for (``None``: this machine's when the
            checkpoint knows it, else the nearest known device,
            :meth:`cdmpp.LatencyPredictor.resolve_device`).
        databases: one tuning work dir (a MetaSchedule JSONDatabase folder, ``cdmpp tune
            --work-dir``) per network, in the order of ``networks``, tuned on this machine;
            empty: the schedules come from a device folder instead.
        retime: also time each task's chosen record again in this run (the retimed sum).
        profile_runs: inferences run with the Relax VM's instrument after the timed ones,
            to time each kernel inside the network (0: none).

    Raises:
        InputError: ``databases`` given, but not one per network.
    """

    networks: tuple[str, ...] = ("resnet_18-b1", "mobilenet_v2-b1", "resnet_50-b1")
    repeat: int = 20
    checkpoint: Path | None = None
    device: str | None = None
    databases: tuple[Path, ...] = ()
    retime: bool = False
    profile_runs: int = 0

    def __post_init__(self):
        if self.databases and len(self.databases) != len(self.networks):
            raise InputError(f"{len(self.databases)} tuning work dirs for {len(self.networks)} networks: "
                             f"give one per network, in the same order")


def _folder_best(db: ds.DeviceDatabase) -> dict:
    """``{structural hash: (workload IRModule, BestRecord)}``: each workload's fastest measured
    record in a device folder (the form :func:`cdmpp.estimate.estimate_network` takes)."""

    best: dict = {}
    for p in db.programs:
        keep_fastest(best, p.workload_index, db.workloads[p.workload_index].mod, p.record, p.latency,
                     p.warm_latency if p.warm_secs is not None else None)
    return {str(structural_hash(mod)): (mod, b) for mod, b in best.values()}


def _memory_database(by_hash: dict):
    """A MetaSchedule ``MemoryDatabase`` holding the records of ``by_hash`` (one per workload)."""

    mem = ms.database.MemoryDatabase()
    for mod, b in by_hash.values():
        rec = b.record
        mem.commit_tuning_record(
            ms.database.TuningRecord(rec.trace, mem.commit_workload(mod), rec.run_secs, rec.target, rec.args_info)
        )
    return mem


def compile_time_and_profile(database, unfused, params: list, example_inputs: tuple, target, repeat: int, guard,
                             profile_runs: int = 0) -> tuple[float, float, dict[str, float]]:
    """Compile a network with a tuning database and time it end to end in the Relax VM,
    then, with ``profile_runs``, where one inference's time goes.

    Args:
        database: a MetaSchedule ``Database`` whose records ``compile_relax`` applies.
        unfused: the network's Relax IRModule before fusion
            (:attr:`cdmpp.network_input.RelaxNetwork.unfused`).
        params: its weights, in ``main``'s parameter order after the inputs.
        example_inputs: the network's input tensors (torch).
        target: the ``Target`` compiled for.
        repeat: timed runs (after one warm-up run).
        guard: a ``QuietGuard``; the timing waits for a quiet machine.
        profile_runs: instrumented inferences after the timed ones (0: no profile).

    The profile runs the network ``profile_runs`` more times with a Relax VM instrument
    that times every call the VM makes (each kernel, each builtin such as an allocation),
    after the end-to-end timing, so that the instrument does not slow the timed runs.

    Returns:
        ``(median seconds of one inference, compile seconds, profile)``, ``profile`` the
        mean seconds per inference of each called function by name (empty without
        ``profile_runs``); the end-to-end time less their sum is the VM's own overhead
        (plus the instrument's).
    """


    t0 = time.perf_counter()
    ex = ms.relax_integration.compile_relax(database, unfused, target, params=None)
    compile_s = time.perf_counter() - t0
    dev = tvm.cpu()
    vm = relax.VirtualMachine(ex, dev)
    args = [*(tvm.runtime.tensor(x.numpy(), dev) for x in example_inputs),
            *(tvm.runtime.tensor(p.numpy(), dev) for p in params)]
    vm["main"](*args)  # warm-up
    guard.wait_quiet()
    timer = vm.time_evaluator("main", dev, number=1, repeat=repeat)
    e2e_s = float(np.median(list(timer(*args).results)))
    profile: dict[str, float] = {}
    if profile_runs > 0:
        started: dict[str, list[float]] = {}

        def instrument(_func, name, before_run, _ret, *_args):
            now = time.perf_counter()
            if before_run:
                started.setdefault(str(name), []).append(now)
            else:
                key = str(name)
                profile[key] = profile.get(key, 0.0) + now - started[key].pop()
            return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

        vm.set_instrument(instrument)
        guard.wait_quiet()
        for _ in range(profile_runs):
            vm["main"](*args)
        profile = {k: v / profile_runs for k, v in sorted(profile.items(), key=lambda kv: -kv[1])}
    return e2e_s, round(compile_s, 1), profile


def load_network(name: str, target) -> RelaxNetwork:
    """A network as :func:`cdmpp.network_input.load_relax` takes it, or a held-out test
    network by name (:func:`benchmarks.held_out.held_out_networks`: ``llama_1024-b1s128``, ...),
    which the product's loaders refuse and the benchmarks measure.

    Raises:
        InputError, UnknownNetworkError: as :func:`cdmpp.network_input.load_relax`.
    """
    if name in held_out_networks():
        spec = held_out_network(name)
        return relax_network(name, spec.build(), spec.example_inputs(), target)
    return load_relax(name, target)


def run_truth_check(folder: Path | None, cfg: TruthCheckConfig, progress: bool = True) -> list[dict]:
    """Measure and estimate each network of ``cfg`` on this machine.

    Args:
        folder: a device folder measured on this machine's CPU (its records are the
            schedules; its target compiles the network); ``None`` with ``cfg.databases``
            (the work dirs' records are the schedules; this machine's target compiles).

    Returns:
        One row per network: ``network``, ``tasks``, ``calls``, ``device`` (the estimate's),
        ``schedules`` (the folder or work dir), ``measured_e2e_s``, ``measured_sum_s``,
        ``estimate_s``, ``estimate_low_s``, ``estimate_high_s``, ``compile_s``, ``view_tasks``
        (tasks the network runs as views, not kernels: left out of every sum and class
        row) and ``per_task`` (each task's weight, measured and estimated latency and
        interval, ``view``); seconds.

    Raises:
        DatasetError: the folder was measured on another CPU, or a task has no measured
            record (before anything is timed).  InputError: neither a folder nor work
            dirs, a work dir that is not a JSONDatabase, or a network that cannot be
            loaded (a Relax JSON file carries no weights to run it with).
        UnknownNetworkError: an unknown zoo name.
    """

    here = local_cpu()
    if cfg.databases:
        target = Target(here.target)
        sources = [(Path(w), work_dir_best(Path(w))) for w in cfg.databases]
    elif folder is not None:
        folder = Path(folder)
        db = ds.load_device_dir(folder)
        if folder.name != here.device_id:
            raise ds.DatasetError(f"{folder} was measured on {folder.name}; this machine is {here.device_id}")
        target = Target(db.manifest["device"]["target"])
        sources = [(folder, _folder_best(db))] * len(cfg.networks)
    else:
        raise InputError("give a device folder measured on this machine, or one tuning work dir per network")
    relax_json = [name for name in cfg.networks if name.endswith(".json")]
    if relax_json:
        raise InputError(f"{relax_json[0]}: a Relax JSON file carries no weights to run the network with; "
                         f"give a zoo name or module.py:function")
    nets = [load_network(name, target) for name in cfg.networks]
    all_tasks = [relax_tasks(net.mod, target) for net in nets]
    for name, tasks, (where, by_hash) in zip(cfg.networks, all_tasks, sources):
        # a view task runs no kernel in the network (cdmpp tune does not tune it): it needs no record
        missing = [t.name for t in tasks if str(structural_hash(t.mod)) not in by_hash and not runs_as_view(t.mod)]
        if missing:
            raise ds.DatasetError(
                f"{name}: {len(missing)} of its {len(tasks)} tasks have no measured record in {where}: "
                f"{', '.join(missing[:3])}; collect or tune them first (cdmpp collect -n NET, cdmpp tune NET)"
            )
    predictor = LatencyPredictor.load(cfg.checkpoint)
    device = cfg.device or (here.device_id if here.device_id in predictor.devices else None)
    guard = QuietGuard(QuietConfig())
    databases: dict[int, object] = {}  # one MemoryDatabase per source: a device folder serves every network
    rows = []
    for name, net, tasks, (where, by_hash) in zip(cfg.networks, nets, all_tasks, sources):
        est = estimate_network(predictor, tasks, device, target, by_hash)
        if id(by_hash) not in databases:
            databases[id(by_hash)] = _memory_database(by_hash)
        e2e_s, compile_s, profile = compile_time_and_profile(
            databases[id(by_hash)], net.unfused, net.params, net.example_inputs, target, cfg.repeat, guard,
            cfg.profile_runs)
        classes = {t.name: kernel_class(t.mod, target) for t in tasks}
        row = {"network": name, "tasks": len(tasks), "calls": int(sum(t.weight for t in tasks)),
               "schedules": str(where), "measured_e2e_s": e2e_s, "compile_s": compile_s}
        row.update(_estimate_fields(est, classes))
        kernels_s = est.measured_warm_total_s if est.measured_warm_total_s is not None else est.measured_total_s
        row["outside_kernels_s"] = e2e_s - kernels_s if kernels_s is not None else None
        row["outside_kernels_basis"] = "warm" if est.measured_warm_total_s is not None else "cold"
        if profile:
            in_network = {t.name: profile[t.name] / t.weight for t in tasks if t.name in profile}
            for per_task in row["per_task"]:
                per_task["in_network_s"] = in_network.get(per_task["task"])
            # a task the VM never calls (a pure reshape runs as a view) has no time inside the network
            row["profiled_kernels_s"] = sum(t.weight * in_network[t.name] for t in tasks if t.name in in_network)
            row["profiled_tasks"] = len(in_network)
        rows.append(row)
        if cfg.retime:
            cold, warm = _retimed(tasks, by_hash, target)
            views = {p["task"] for p in row["per_task"] if p["view"]}
            called = [t for t in tasks if t.name not in views]
            row["retimed_sum_s"], row["retimed_warm_sum_s"] = _weighted_sum(called, cold), _weighted_sum(called, warm)
            for per_task in row["per_task"]:
                per_task["retimed_s"], per_task["retimed_warm_s"] = cold.get(per_task["task"]), warm.get(per_task["task"])
        _measured_class_rows(row)
        if progress:
            print(format_truth_check([row]), flush=True)
    return rows


def _estimate_fields(est, classes: dict[str, str]) -> dict:
    """A truth-check row's fields that come from the estimate (and from the records'
    stored timings): the totals, ``per_task`` and the cold and warm class rows.

    Args:
        est: a :class:`cdmpp.estimate.NetworkEstimate` of the network.
        classes: ``{task name: kernel class}`` (:func:`cdmpp.kernel_class.kernel_class`).
    """
    views = {t.task for t in est.tasks if t.view}
    kernels = [t for t in est.tasks if not t.view]  # a view task is no kernel in the network: left out below
    return {
        "device": est.device,
        "measured_sum_s": est.measured_total_s,
        "estimate_s": est.total_s,
        "estimate_low_s": est.low_s,
        "estimate_high_s": est.high_s,
        "measured_warm_sum_s": est.measured_warm_total_s,
        "warm_estimate_s": est.warm_total_s,
        "view_tasks": len(views),
        "per_task": [
            {"task": t.task, "weight": t.weight, "kernel_class": classes[t.task], "measured_s": t.measured_s,
             "estimate_s": t.latency_s, "low_s": t.low_s, "high_s": t.high_s,
             "measured_warm_s": t.measured_warm_s, "warm_estimate_s": t.warm_s, "view": t.view}
            for t in est.tasks
        ],
        "between_kernels_estimate_s": est.between_kernels_s,
        "by_class": {c: asdict(v) for c, v in class_levels(
            (classes[t.task], t.weight, t.latency_s, t.measured_s) for t in kernels).items()},
        "by_class_warm": {c: asdict(v) for c, v in class_levels(
            (classes[t.task], t.weight, t.warm_s, t.measured_warm_s) for t in kernels).items()},
    }


def _measured_class_rows(row: dict) -> None:
    """Add the class rows of the times measured in the truth check itself, from ``per_task``:
    inside the network (``in_network_s``, against the warm estimate, the cold one where the
    checkpoint has no warm row) and retimed warm (``retimed_warm_s``, against the warm
    estimate); a row is added only where its times exist."""
    kernels = [t for t in row["per_task"] if not t["view"]]
    if any(t.get("in_network_s") is not None for t in kernels):
        row["by_class_in_network"] = {c: asdict(v) for c, v in class_levels(
            (t["kernel_class"], t["weight"],
             t["warm_estimate_s"] if t["warm_estimate_s"] is not None else t["estimate_s"], t.get("in_network_s"))
            for t in kernels).items()}
    if any("retimed_warm_s" in t for t in kernels):
        row["by_class_retimed_warm"] = {c: asdict(v) for c, v in class_levels(
            (t["kernel_class"], t["weight"], t["warm_estimate_s"], t.get("retimed_warm_s")) for t in kernels).items()}


def rescore_truth_check(rows: list[dict], checkpoint: Path | None = None, progress: bool = True) -> list[dict]:
    """Stored truth-check rows with another checkpoint's estimate, nothing timed again.

    Each row's network is loaded and split into tasks for the row's device (its target
    from the checkpoint's device table), its schedules (``schedules``, a tuning work dir)
    are read again, and the estimate is made with ``checkpoint``. What the truth check
    measured (end to end, retimed, inside the network, the records' own timings) is kept;
    every field made from the estimate is replaced. So a checkpoint trained anywhere can
    be checked against networks measured on a CPU it runs on no longer.

    Args:
        rows: rows of ``cdmpp bench truth-check --output`` (:func:`run_truth_check`), each
            with ``schedules`` a tuning work dir.
        checkpoint: the checkpoint of the new estimate (``None``: the shipped one).

    Returns:
        The rows, in order, with the new estimate; seconds.

    Raises:
        InputError: a row whose schedules are a device folder rather than a work dir (its
            fastest records depend on the folder's state when it was measured) or are not a
            JSONDatabase, or whose tasks differ from the stored ones (another TVM, or
            another network).
        UnknownDeviceError: the checkpoint does not know a row's device.
    """
    predictor = LatencyPredictor.load(checkpoint)
    out = []
    for old in rows:
        where = Path(old["schedules"])
        if (where / "manifest.json").is_file():
            raise InputError(f"{old['network']}: its schedules ({where}) are a device folder, not a tuning work dir; "
                             f"only rows of --work-dirs can be rescored")
        target = Target(predictor.descriptor(old["device"]).target)
        net = load_network(old["network"], target)
        tasks = relax_tasks(net.mod, target)
        stored = {t["task"]: t for t in old["per_task"]}
        if {t.name for t in tasks} != set(stored):
            raise InputError(f"{old['network']}: its tasks differ from the stored row's "
                             f"({len(tasks)} against {len(stored)}); rescore with the TVM and network it was measured with")
        est = estimate_network(predictor, tasks, old["device"], target, work_dir_best(where))
        row = {**old, **_estimate_fields(est, {t.name: stored[t.name]["kernel_class"] for t in tasks})}
        kept = ("in_network_s", "retimed_s", "retimed_warm_s")
        for per_task in row["per_task"]:
            per_task.update({k: stored[per_task["task"]][k] for k in kept if k in stored[per_task["task"]]})
        _measured_class_rows(row)
        out.append(row)
        if progress:
            print(format_truth_check([row]), flush=True)
    return out


def _retimed(tasks, by_hash: dict, target) -> tuple[dict[str, float], dict[str, float]]:
    """Each task's chosen record built and timed again now, with the collector's two
    protocols: ``({task name: cold seconds}, {task name: warm seconds})`` (a task without a
    record, a view, and a record that fails to build or run are left out)."""
    chosen = {t.name: by_hash[key][1].record for t in tasks if (key := str(structural_hash(t.mod))) in by_hash}
    return retime_records_both(chosen, target)


def _weighted_sum(tasks, secs: dict[str, float]) -> float | None:
    """``sum(task weight x seconds)``; ``None`` when a task has no time."""
    if any(t.name not in secs for t in tasks):
        return None
    return sum(t.weight * secs[t.name] for t in tasks)


def format_truth_check(rows: list[dict], markdown: bool = False) -> str:
    """The rows as a table (milliseconds), with the ratios of the sums to the end-to-end latency."""

    retimed = any("retimed_sum_s" in r for r in rows)
    head = ["network", "tasks", "calls", "measured e2e ms", "measured sum ms", "sum / e2e", "warm sum / e2e",
            "outside kernels ms", "est. between kernels ms", "estimate ms", "10-90% ms", "estimate / e2e", "estimate / sum", "warm estimate / e2e"]
    if retimed:
        head += ["retimed sum ms", "retimed sum / e2e", "estimate / retimed sum", "retimed warm sum / e2e",
                 "warm estimate / retimed warm sum"]
    profiled = any(r.get("profiled_kernels_s") for r in rows)
    if profiled:
        head += ["kernels in the network / e2e"]
    body = []

    def ratio(num, den):
        return f"{num / den:.2f}" if num is not None and den else "-"

    for r in rows:
        e2e, msum, est = r["measured_e2e_s"], r["measured_sum_s"], r["estimate_s"]
        body.append([
            r["network"], str(r["tasks"]) + (f" ({r['view_tasks']} views)" if r.get("view_tasks") else ""),
            str(r["calls"]), f"{1e3 * e2e:.2f}", f"{1e3 * msum:.2f}", ratio(msum, e2e),
            ratio(r.get("measured_warm_sum_s"), e2e), _outside(r),
            "-" if r.get("between_kernels_estimate_s") is None else f"{1e3 * r['between_kernels_estimate_s']:.2f}",
            f"{1e3 * est:.2f}", f"{1e3 * r['estimate_low_s']:.2f}-{1e3 * r['estimate_high_s']:.2f}",
            ratio(est, e2e), ratio(est, msum), ratio(r.get("warm_estimate_s"), e2e),
        ])
        if retimed:
            rs = r.get("retimed_sum_s")
            rw = r.get("retimed_warm_sum_s")
            body[-1] += [f"{1e3 * rs:.2f}" if rs else "-", ratio(rs, e2e), ratio(est, rs), ratio(rw, e2e),
                         ratio(r.get("warm_estimate_s"), rw)]
        if profiled:
            body[-1] += [ratio(r.get("profiled_kernels_s"), e2e)]
    return render_table(head, body, markdown) + "\n\n" + format_kernel_classes(rows, markdown)


def _outside(row: dict) -> str:
    """End to end less the kernel sum (warm where the records were timed warm), milliseconds."""
    out = row.get("outside_kernels_s")
    return "-" if out is None else f"{1e3 * out:.2f} ({row.get('outside_kernels_basis', 'cold')})"


def format_kernel_classes(rows: list[dict], markdown: bool = False) -> str:
    """Each network's tunable and untunable tasks (:mod:`cdmpp.kernel_class`), cold and warm:
    measured and estimated sums (milliseconds), each class's level (mean log estimate /
    measured over its tasks), the share of its tasks within 1.25x, and the worst task."""
    head = ["network", "class", "protocol", "tasks", "calls", "measured ms", "estimate ms", "estimate / measured",
            "level (mean log e/m)", "within 1.25x", "worst e/m"]
    body = []
    for r in rows:
        for protocol, key in (("cold", "by_class"), ("warm", "by_class_warm"), ("warm, retimed", "by_class_retimed_warm"),
                              ("in the network", "by_class_in_network")):
            for cls, v in sorted(r.get(key, {}).items()):
                body.append([r["network"], cls, protocol, str(v["tasks"]), str(v["calls"]),
                             f"{1e3 * v['measured_s']:.2f}", f"{1e3 * v['predicted_s']:.2f}",
                             f"{v['predicted_s'] / v['measured_s']:.2f}", f"{v['mean_log_ratio']:+.2f}",
                             f"{v['within']:.0%}", f"{v['worst_ratio']:.2f}"])
    return render_table(head, body, markdown, left=3)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench truth-check``'s arguments."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("-d", "--dataset", help="this machine's device folder (its fastest records are used)")
    src.add_argument("--work-dirs", nargs="+", default=None,
                     help="one tuning work dir (cdmpp tune --work-dir) per network, in the order of -n, tuned on "
                          "this machine (each task's fastest record is used)")
    src.add_argument("--rescore", nargs="+", default=None, metavar="ROWS",
                     help="truth-check JSON files (--output of runs with --work-dirs): their networks estimated again "
                          "with -c, on the rows' devices, nothing timed; what was measured is kept")
    parser.add_argument("-n", "--networks", nargs="+", default=["resnet_18-b1", "mobilenet_v2-b1", "resnet_50-b1"],
                        help="zoo names, held-out test networks by name (llama_1024-b1s128, ...) or module.py:function")
    parser.add_argument("--repeat", type=int, default=20, help="end-to-end runs timed (median)")
    parser.add_argument("-c", "--checkpoint", default=None, help="checkpoint of the estimate (default: the shipped one)")
    parser.add_argument("--device", default=None, help="device id of the estimate (default: this machine's)")
    parser.add_argument("--output", default=None, help="also write the rows (with per-task figures) as JSON here")
    parser.add_argument("--retime", action="store_true",
                        help="also time each task's chosen record again now, cold and warm (the retimed sums, in the "
                             "same run as the end-to-end latency)")
    parser.add_argument("--profile", type=int, default=0, metavar="RUNS",
                        help="also run the network RUNS times with the Relax VM's instrument, timing each kernel "
                             "inside the network (its level against the warm estimate) (default 0: none)")


def _run_truth_check(args) -> int:
    if args.rescore:
        checkpoint = Path(args.checkpoint) if args.checkpoint else None
        rows = rescore_truth_check(read_truth_check_rows(args.rescore), checkpoint)
        print_and_write_rows(rows, format_truth_check(rows, markdown=True), args.output, checkpoint)
        return 0
    cfg = TruthCheckConfig(tuple(args.networks), args.repeat, Path(args.checkpoint) if args.checkpoint else None,
                           args.device, tuple(Path(w) for w in args.work_dirs or ()), args.retime, args.profile)
    rows = run_truth_check(Path(args.dataset) if args.dataset else None, cfg)
    print_and_write_rows(rows, format_truth_check(rows, markdown=True), args.output, cfg.checkpoint)
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench truth-check``."""
    return _run_truth_check(args)
