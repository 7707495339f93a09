"""The collection and dataset subcommands of ``cdmpp``: networks, collect, remeasure, validate, import, pack.

Each function here is a subcommand's body (``args`` from :func:`add_parsers`); every
heavy import waits until a subcommand runs.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path

from . import dataset as ds
from .card import card, drift_line
from .cli_flags import Flag, add_flags, given_fields
from .collect import (
    CollectConfig,
    MachineBusyError,
    MeasureConfig,
    QuietConfig,
    RPCSettings,
    StageClock,
    collect,
    import_database,
    remeasure,
)
from .errors import InputError
from .schema import parse_plan, tasks_of


def _print_folds(k: int, datasets: list[str] | None) -> int:
    """``cdmpp networks --folds K``: each leave-family-out fold's families, networks and
    workloads, over the zoo, or over the networks of ``datasets``' manifests."""
    from . import networks  # noqa: PLC0415  (keeps torch off this module's import)
    from .train.folds import fold_name, fold_networks  # noqa: PLC0415  (keeps torch off this module's import)
    from .train.splits import networks_of  # noqa: PLC0415  (keeps torch off this module's import)

    nets: dict[str, set[str]] = {}
    for root in datasets or ():
        for d in ds.device_dirs(Path(root)):
            for n, keys in networks_of(ds.read_manifest(d)).items():
                nets.setdefault(n, set()).update(keys)
    if not datasets:
        nets = {n: set() for n in networks.network_names()}
    every = set().union(*nets.values()) if nets else set()
    where = "the dataset" if datasets else "the zoo"
    print(f"{len(nets)} networks of {where}" + (f", {len(every)} workloads" if datasets else "")
          + f", in {k} leave-family-out folds (cdmpp train --holdout fold-I-of-{k}):")
    for i in range(1, k + 1):
        name = fold_name(i, k)
        try:
            members = fold_networks(set(nets), name)
        except InputError:
            print(f"{name}: no network of {where}")
            continue
        archs = sorted({m.rsplit("-", 1)[0] for m in members})
        count = f"{len(set().union(*(nets[n] for n in members)))} workloads, " if datasets else ""
        print(f"{name}: {count}{len(members)} networks of {len(archs)} architectures: {', '.join(archs)}")
    return 0


def _run_networks(args) -> int:
    from . import networks  # noqa: PLC0415  (keeps torch off this module's import)

    if args.refine_sweep is not None:
        return _refine_sweep(args)

    if args.folds is not None:
        if args.folds < 2:
            raise InputError(f"--folds takes K >= 2, got {args.folds}")
        return _print_folds(args.folds, args.dataset and [args.dataset])

    names = networks.network_names()
    known: dict[str, tuple[int, int]] = {}  # network -> (tasks, total task weight), from a dataset
    if args.dataset:
        for d in ds.device_dirs(Path(args.dataset)):
            m = ds.read_manifest(d)
            tasks = tasks_of(m)
            for n, info in m.get("networks", {}).items():
                weight = sum(t.weight for t in tasks if t.network == n)
                known.setdefault(n, (int(info["tasks"]), weight))
    target = None
    if args.count_tasks:
        from .device import local_cpu  # noqa: PLC0415  (only on the branch that needs it)
        from .tvm_compat import Target  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        target = Target(local_cpu().target)
    print(f"{'network':<30}{'family':<14}{'input':<20}{'tasks':>6}{'weight':>8}  source")
    failed = []
    for n in names:
        spec = networks.get_network(n)
        if n not in known and target is not None:
            from .collect import extract_network_tasks  # noqa: PLC0415  (only on the branch that needs it)

            try:
                tasks = extract_network_tasks(n, target)
            except Exception as err:  # noqa: BLE001  torch.export and the Relax frontend raise many types
                failed.append(n)
                print(f"{n}: export or Relax import failed: {type(err).__name__}: {str(err).splitlines()[0][:300]}",
                      file=sys.stderr)
                continue
            known[n] = (len(tasks), sum(t.weight for t in tasks))
        tasks, weight = known.get(n, ("?", "?"))
        print(f"{n:<30}{spec.family:<14}{str(spec.input_shape):<20}{tasks:>6}{weight:>8}  {spec.source}")
    archs = networks.architectures()
    print(f"{len(names)} networks of {len(archs)} architectures in "
          f"{len({networks.get_network(v[0]).family for v in archs.values()})} families"
          + (f"; {len(failed)} failed to import: {', '.join(failed)}" if failed else ""))
    return 0


def _zero_is_none(value: int) -> int | None:
    return value or None  # 0: always every repeat


COLLECT_FLAGS = (
    Flag("--programs-per-task", "collect", "programs_per_task", dict(type=int)),
    Flag("--no-warm", "measure", "warm", dict(action="store_true", help="time each program cold only (default: cold, "
          "then warm: without the cache flush, as inside a network; the warm timings go to their own tuning-record "
          "file)"), invert=True),
    Flag("--warm-min-repeat-ms", "measure", "warm_min_repeat_ms", dict(type=int, metavar="MS", help="each warm repeat "
          "runs the kernel back to back until it lasts MS ms (1: a kernel under 100 us gets at least 10 runs per "
          "repeat; 0: one run per repeat)")),
    Flag("--batch-size", "collect", "batch_size", dict(type=int)),
    Flag("--seed", "collect", "seed", dict(type=int)),
    Flag("--repeat", "measure", "repeat", dict(type=int)),
    Flag("--adaptive-repeats", "measure", "adaptive_repeats", dict(type=int, metavar="K", help="stop after "
          "K repeats when they agree within 2%% and their median is at least 2 ms (0: always --repeat)"),
         convert=_zero_is_none),
    Flag("--max-tasks", "collect", "max_tasks_per_network", dict(type=int, help="cap tasks per network")),
    Flag("--evolutionary-fraction", "collect", "evolutionary_fraction", dict(type=float, help="share of each task's "
          "programs from evolutionary search, after the random ones (0: random only)")),
    Flag("--evolutionary-population", "collect", "evolutionary_population", dict(type=int, help="population of the "
          "evolutionary search (smaller: faster search)")),
    Flag("--tuned-tasks", "collect", "tuned_tasks", dict(type=int, metavar="N", help="the fast-end policy: the N "
          "largest tasks of each network (task weight x FLOPs) get --tuned-programs more programs from a tuner's "
          "evolutionary search after the last round")),
    Flag("--tuned-programs", "collect", "tuned_programs", dict(type=int, help="programs per tuned task, beyond the "
          "round's")),
    Flag("--tuned-guide", "collect", "tuned_guide", dict(choices=("xgb", "cdmpp"), help="the cost model guiding the "
          "tuned phase: MetaSchedule's XGBModel or cdmpp's plugin")),
    Flag("--tuned-checkpoint", "collect", "tuned_checkpoint", dict(type=Path, help="the plugin's checkpoint (default: "
          "the shipped one)")),
    Flag("--tuned-population", "collect", "tuned_population", dict(type=int, help="population of the tuned phase's "
          "search")),
    Flag("--tuned-skip-network", "collect", "tuned_skip_networks", dict(nargs="+", metavar="NET", help="never tune "
          "the workloads of these networks (a held-out test network; its tasks must be in the folder's manifest, or "
          "the network among -n)"), convert=tuple),
    Flag("--tuned-only", "collect", "tuned_only", dict(action="store_true", help="visit only the tuned tasks (their "
          "rounds' programs, then the tuned phase); the networks' other tasks are listed in the manifest but not "
          "measured")),
    Flag("--new-workloads-only", "collect", "new_workloads_only", dict(action="store_true", help="visit only the "
          "tasks whose workload no other device folder of -o has measured (by structural hash): widens the corpus's "
          "distinct workloads from a second machine")),
    Flag("--tasks-in-flight", "collect", "tasks_in_flight", dict(type=int, choices=(1, 2), help="2: one task's batch "
          "builds while another task samples (build workers are paused during every timing); 1: sample, build and "
          "time each batch in turn")),
    Flag("--disable-avx512", "collect", "disable_avx512", dict(action="store_true", help="measure as the AVX-512-off "
          "device")),
    Flag("--gpu", "collect", "gpu", dict(action="store_true", help="measure CUDA programs on this host's NVIDIA GPU "
          "instead of its CPU")),
    Flag("--retry-failed", "collect", "retry_failed", dict(action="store_true", help="time again the programs that "
          "failed before (their lines stay in failures.jsonl)")),
    Flag("--retry-exhausted", "collect", "retry_exhausted", dict(action="store_true", help="visit tasks whose design "
          "space an earlier visit found used up (skipped by default)")),
    Flag("--allow-busy", "quiet", "enabled", dict(action="store_true", help="turn the quiet-machine guard off: time "
          "programs even while other processes use the CPU"), invert=True),
    Flag("--busy-cores", "quiet", "max_other_cores", dict(type=float, help="quiet-machine guard: CPU (in cores) other "
          "processes may use while a batch is timed")),
)
"""The options of ``cdmpp collect`` that set one config field each, written once: the parser
is built from this table (each default read from the config dataclass) and so are the
configs (:func:`collect_configs`)."""

_CONFIGS = {"collect": CollectConfig, "measure": MeasureConfig, "quiet": QuietConfig}


def _add_collect_flags(s: argparse.ArgumentParser) -> None:
    add_flags(s, COLLECT_FLAGS, _CONFIGS)


def collect_configs(args: argparse.Namespace) -> tuple[dict, MeasureConfig, QuietConfig]:
    """The :class:`CollectConfig` keyword arguments, :class:`MeasureConfig` and
    :class:`QuietConfig` of parsed ``cdmpp collect`` options (:data:`COLLECT_FLAGS`); an option
    left out keeps the dataclass default.

    Raises:
        InputError: a setting the configs refuse (named).
    """
    given = given_fields(args, COLLECT_FLAGS)
    return given.get("collect", {}), MeasureConfig(**given.get("measure", {})), QuietConfig(**given.get("quiet", {}))


def _run_collect(args) -> int:

    rpc = None
    if args.rpc_tracker:
        rpc = RPCSettings.from_address(args.rpc_tracker, args.rpc_key, parallel_sessions=args.rpc_sessions)
    try:
        rounds = tuple(int(x) for x in args.rounds.split(",")) if args.rounds else ()
    except ValueError:
        raise InputError(f"--rounds takes counts like 32,64,128, got {args.rounds!r}") from None
    networks_, notes = list(args.networks), {}
    if args.plan:
        plan = parse_plan(Path(args.plan))
        networks_ += [n for n in plan.networks if n not in networks_]
        notes = dict.fromkeys(plan.networks, plan.chosen_by)
    if args.sweep:
        from .networks.sweep import sweep_names  # noqa: PLC0415  (keeps torch off the CLI's import)

        networks_ += sweep_names(args.sweep, args.sweep_seed)
    if not networks_:
        raise InputError("give networks to collect (-n NET ..., --plan FILE or --sweep N)")
    fields, measure, quiet = collect_configs(args)
    cfg = CollectConfig(rpc=rpc, networks=networks_, out_dir=Path(args.out), rounds=rounds, measure=measure, quiet=quiet,
                        pack_every_s=None if args.pack_every is None else 60.0 * args.pack_every, network_notes=notes,
                        **fields)
    requests = []

    def stop(signum, _frame):
        requests.append(signum)
        if len(requests) == 1:
            print("\nstopping after the batch in flight (signal again to stop at once)", file=sys.stderr)
        else:
            raise KeyboardInterrupt(f"signal {signum}")

    # Ctrl-C and `kill` both stop cleanly, also where a background shell ignores SIGINT
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    guide = None
    if cfg.tuned_tasks and cfg.tuned_guide == "cdmpp":
        from .tuning.cost_model import CdmppCostModel  # noqa: PLC0415  (keeps torch off the CLI's import)

        guide = CdmppCostModel.guide(cfg.tuned_checkpoint)
    try:
        s = collect(cfg, should_stop=lambda: bool(requests), guide=guide)
    except (KeyboardInterrupt, RuntimeError) as err:
        # a signal that lands inside a TVM callback comes back as a RuntimeError
        if not requests or isinstance(err, MachineBusyError):
            raise
        print(f"\ninterrupted ({err}): every finished record is on disk; run the same command to continue",
              file=sys.stderr)
        return 130
    if args.profile:
        clock = StageClock()
        clock.seconds.update(s.stage_seconds)
        print(clock.table(s.measured))
    if s.stopped:
        print(
            f"{s.device_id}: stopped after {s.measured} measured, {s.failed} failed; "
            "run the same command to continue",
            file=sys.stderr,
        )
        return 130
    print(
        f"{s.device_id}: {s.measured} measured, {s.failed} failed, {s.skipped_duplicates} duplicates skipped "
        f"in {s.seconds:.0f} s ({60 * s.measured / max(s.seconds, 1e-9):.1f} programs/min) -> {s.device_dir}"
    )
    if s.task_errors:
        print(
            f"{s.task_errors} task(s) skipped after an error (their messages are under 'task_errors' in the "
            "manifest's last collection); run the same command to try them again",
            file=sys.stderr,
        )
    return 0


def _run_remeasure(args) -> int:

    for d in ds.device_dirs(Path(args.dataset)):
        try:
            path = remeasure(d, sample=args.sample, seed=args.seed)
        except ValueError as err:
            print(f"{d}: skipped: {err}", file=sys.stderr)
            continue
        print(f"{d}: re-measured programs appended to {path}")
        print(drift_line(d))
    return 0


def _run_validate(args) -> int:

    bad_total = 0
    for d in ds.device_dirs(Path(args.dataset)):
        try:
            db = ds.load_device_dir(d)
        except ds.DatasetError as err:
            print(f"{d}: ERROR {err}")
            bad_total += 1
            continue
        print(f"{d}: {len(db.workloads)} workloads, {len(db.programs)} measured programs, {len(db.bad_lines)} bad lines")
        for b in db.bad_lines:
            print(f"  {b.path}:{b.lineno}: {b.error}")
        bad_total += len(db.bad_lines)
    return 1 if bad_total else 0


def expand_work_dir(args: argparse.Namespace) -> None:
    """Expand ``--work-dir`` into the MetaSchedule database file paths it holds
    (:func:`cdmpp.dataset.database_files`: plain or gzipped).

    Raises:
        DatasetError: the folder lacks one of them.
    """

    if args.work_dir:
        wl, rec = ds.database_files(Path(args.work_dir))
        args.workload_db, args.record_db = str(wl), str(rec)


def _run_import(args) -> int:

    expand_work_dir(args)
    if not args.record_db or not args.workload_db:
        print("error: give --work-dir DIR, or --workload-db and --record-db", file=sys.stderr)
        return 2
    n = import_database(Path(args.workload_db), Path(args.record_db), args.device, Path(args.out), args.network)
    print(f"{n} records added to {Path(args.out) / args.device}")
    return 0


def _refine_sweep(args) -> int:
    """``cdmpp networks --refine-sweep DEVICE_FOLDER``: the sweep's second pass, planned into a file."""
    if args.checkpoint is None or args.out is None:
        raise InputError("--refine-sweep needs --checkpoint (whose errors choose the shapes) and --out (the plan file)")
    from .networks.sweep import refine_names  # noqa: PLC0415  (keeps torch off the CLI's import)
    from .train.evaluate import sweep_entry_errors  # noqa: PLC0415  (keeps torch off the CLI's import)
    from .train.report import checkpoint_line  # noqa: PLC0415  (keeps torch off the CLI's import)

    folder = Path(args.refine_sweep)
    errors = sweep_entry_errors(Path(args.checkpoint), folder, Path(args.cache), progress=True)
    known = set(ds.read_manifest(folder).get("networks", {}))
    names = refine_names(errors, args.count, args.seed, known=known, per_entry=args.per_entry)
    bad = sum(1 for e in errors.values() if e > math.log(1.25))
    ckpt = checkpoint_line(Path(args.checkpoint)).removeprefix("Checkpoint: ")
    chosen_by = (f"second pass, nn-Meter style: near the {min(bad, -(-args.count // args.per_entry))} entries (of {bad} "
                 f"beyond 1.25x, of {len(errors)} scored) whose untunable tasks {ckpt} placed worst on this folder "
                 f"(mean |log predicted / measured|, cold), each dimension scaled by 1/2 to 2 at random "
                 f"(`cdmpp networks --refine-sweep DEVICE_FOLDER --count {args.count} --seed {args.seed} "
                 f"--per-entry {args.per_entry}`)")
    ds.write_json_atomic(Path(args.out), {"networks": names, "chosen_by": chosen_by})
    print(f"{len(names)} new sweep entries near the worst of {bad} misplaced entries ({len(errors)} scored) -> "
          f"{args.out}; collect them with `cdmpp collect --plan {args.out} -o DATASET ...`")
    return 0


def _run_pack(args) -> int:

    for d in ds.device_dirs(Path(args.dataset)):
        for p in ds.pack(d):
            print(f"{p} ({p.stat().st_size / 2**20:.1f} MiB)")
        (d / "README.md").write_text(card(d), encoding="utf-8")
        print(f"{d / 'README.md'} (dataset card)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The collection and dataset subcommands: networks, collect, remeasure, validate, import, pack."""
    s = sub.add_parser("networks", help="list the network zoo")
    s.add_argument("--count-tasks", action="store_true", help="extract each network's tasks and count them (slow)")
    s.add_argument("--dataset", default=None, help="take task counts from this dataset's manifests (instant)")
    s.add_argument("--folds", type=int, default=None, metavar="K",
                   help="list the K leave-family-out folds instead (cdmpp train --holdout fold-I-of-K): each "
                        "fold's architectures, over the zoo or, with --dataset, the dataset's networks and workloads")
    s.add_argument("--refine-sweep", default=None, metavar="DEVICE_FOLDER",
                   help="instead, plan the operator sweep's second pass (nn-Meter style): new sweep entries near "
                        "the entries of DEVICE_FOLDER that --checkpoint places worst, written to --out for "
                        "`cdmpp collect --plan`")
    s.add_argument("-c", "--checkpoint", default=None,
                   help="with --refine-sweep: the checkpoint whose errors choose the shapes (one that never trained "
                        "on these entries)")
    s.add_argument("--count", type=int, default=400, help="with --refine-sweep: new entries to plan")
    s.add_argument("--per-entry", type=int, default=4, help="with --refine-sweep: new entries near each misplaced entry")
    s.add_argument("--seed", type=int, default=0, help="with --refine-sweep: seed of the new shapes")
    s.add_argument("--cache", default=".cdmpp-cache", help="with --refine-sweep: featurization cache folder")
    s.add_argument("-o", "--out", default=None, help="with --refine-sweep: the plan file to write (JSON)")
    s.set_defaults(func=_run_networks)

    s = sub.add_parser("collect", help="measure sampled schedules of networks' tasks on this CPU (resumable)")
    s.add_argument("-n", "--networks", nargs="+", default=[], help="zoo names (see `cdmpp networks`)")
    s.add_argument("--sweep", type=int, default=0, metavar="N",
                   help="also collect N entries of the operator sweep (layout, normalisation, softmax, reductions, "
                        "elementwise, masks, rotary, embedding lookups at shapes drawn wide; cdmpp.networks.sweep)")
    s.add_argument("--sweep-seed", type=int, default=0, help="seed of the sweep's shapes")
    s.add_argument("--plan", default=None, metavar="FILE",
                   help="also collect the networks of a plan file (JSON: networks, chosen_by; `cdmpp networks "
                        "--refine-sweep` writes one), noting in the manifest how they were chosen")
    s.add_argument("-o", "--out", required=True, help="dataset folder")
    _add_collect_flags(s)
    s.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT", help="time on boards behind a TVM RPC tracker")
    s.add_argument("--rpc-key", default=None, help="device key the boards registered with")
    s.add_argument("--rpc-sessions", type=int, default=1, help="boards timed at once")
    s.add_argument(
        "--pack-every",
        type=float,
        default=None,
        metavar="MIN",
        help="also keep the gzipped (committed) files up to date, between tasks at most every MIN minutes and at the "
             "end, when the dataset card (README.md) is rewritten too",
    )
    s.add_argument(
        "--rounds",
        default=None,
        metavar="N,N,...",
        help="grow every task round after round to each count, e.g. 32,64,128 (replaces --programs-per-task)",
    )
    s.add_argument("--profile", action="store_true",
                   help="print the wall time of each stage at the end (it is in the manifest either way)")
    s.set_defaults(func=_run_collect)

    s = sub.add_parser("remeasure", help="time a random sample of measured programs again (run-to-run drift)")
    s.add_argument("dataset")
    s.add_argument("--sample", type=int, default=100, help="programs to re-measure per device folder")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(func=_run_remeasure)

    s = sub.add_parser("validate", help="check a dataset's files and report corrupt lines")
    s.add_argument("dataset")
    s.set_defaults(func=_run_validate)

    s = sub.add_parser("import", help="add any MetaSchedule JSONDatabase to a dataset, tagged with a device")
    s.add_argument("--work-dir", default=None, help="a MetaSchedule work_dir with database_*.json")
    s.add_argument("--workload-db", default=None)
    s.add_argument("--record-db", default=None)
    s.add_argument("--device", required=True, help="device id, e.g. cpu-amd_epyc_7763-zen3-avx2")
    s.add_argument("--network", default="imported", help="network name recorded for its tasks")
    s.add_argument("-o", "--out", required=True, help="dataset folder")
    s.set_defaults(func=_run_import)

    s = sub.add_parser("pack", help="gzip a dataset's database files for shipping and write its dataset card")
    s.add_argument("dataset")
    s.set_defaults(func=_run_pack)
