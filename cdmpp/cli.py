"""The ``cdmpp`` command line: one subcommand per job of a user, and one ``bench`` group.

    cdmpp networks                      list the network zoo
    cdmpp collect  -n NET ... -o DIR    measure sampled schedules on this CPU or GPU (--gpu; resumable)
    cdmpp remeasure DIR                 time a random sample of measured programs again (drift)
    cdmpp import   --work-dir W --device ID -o DIR   add a user's JSONDatabase to a dataset
    cdmpp validate DIR                  check a dataset's files, report bad lines
    cdmpp pack     DIR                  gzip a dataset's database files, write its card
    cdmpp train    -d DIR --holdout NET train the transformer and the tree baseline, print the table
                                        (NET: a network, or a leave-family-out fold like fold-1-of-4,
                                        listed by `cdmpp networks --folds 4`)
    cdmpp evaluate -c CKPT -d DIR       score a checkpoint on a held-out network or any JSONDatabase
    cdmpp adapt    -s DEVDIR -o OUT     teach a checkpoint this machine (or --measured-dir: a device measured elsewhere)
    cdmpp predict  --work-dir W         predicted latency (and interval, and error) of each program, as CSV
    cdmpp estimate NET|relax.json|module.py:function --device D   a whole network's per-task table and total
    cdmpp tune     NET|relax.json|module.py:function --work-dir W   tune a network with the plugin, build it
    cdmpp serve                         HTTP prediction service
    cdmpp bench NAME ...                benchmarks and studies (the ``benchmarks`` package registers this
                                        group through the ``cdmpp.commands`` entry point)

"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path

from .cli_flags import Flag, add_flags, given_fields
from .data_cli import add_parsers as add_data_parsers
from .data_cli import expand_work_dir
from .errors import CdmppError
from .inference_cli import add_parsers as add_inference_parsers
from .predictor import DEFAULT_CHECKPOINT
from .recipe_args import add_model_arguments, model_configs
from .serve.config import ServeConfig
from .train.config import AdaptConfig, TrainData

COMMAND_GROUP = "cdmpp.commands"
"""Entry-point group of the command groups other packages add to ``cdmpp``: each entry is a
function ``add_parser(subparsers)`` that adds its subcommand; a subcommand whose defaults
set ``passes_rest=True`` gets the arguments it does not declare as ``func(args, rest)``."""


def _run_train(args) -> int:
    from .featurize.parallel import default_workers  # noqa: PLC0415  (keeps the featurizer off this module's import)
    from .train.train import train  # noqa: PLC0415  (keeps lightning, torch off this module's import)

    mcfg, tcfg = model_configs(args)
    data = TrainData(
        datasets=[Path(d) for d in args.dataset],
        holdout=args.holdout,
        split=args.split,
        exclude_devices=tuple(args.exclude_device or ()),
        pool=[Path(p) for p in args.pool or []],
        cmd_target=Path(args.cmd_target) if args.cmd_target else None,
        benchmark_table=Path(args.benchmark_table) if args.benchmark_table else None,
        cache_dir=Path(args.cache),
        featurize_workers=default_workers(),
    )
    import torch  # noqa: PLC0415  (keeps torch off this module's import)

    torch.set_num_threads(max(1, os.cpu_count() or 1))  # the command trains on every core; the library sets no threads
    result = train(data, Path(args.out), mcfg, tcfg, use_wandb=not args.no_wandb, resume=args.resume)
    print(f"checkpoint written to {args.out} (model card: {Path(args.out) / 'README.md'})")
    if result.rows:  # one line; `cdmpp evaluate` prints the table
        per_model = result.rows if not result.by_device else {
            f"{model} on {device_id}": row for device_id, rows in result.rows.items() for model, row in rows.items()}
        mape = ", ".join(f"{model} {row['mape']:.1%}" for model, row in per_model.items())
        print(f"test programs' MAPE: {mape}; the table: cdmpp evaluate -c {args.out} -d {' '.join(args.dataset)}")
    return 0


def _run_evaluate(args) -> int:
    from .train.evaluate import EvaluateOptions, evaluate  # noqa: PLC0415  (keeps torch off this module's import)
    from .train.report import format_device_table, format_table, write_rows  # noqa: PLC0415  (keeps torch off this module's import)

    expand_work_dir(args)
    if not args.dataset and not args.record_db and not args.tuned:
        print("error: give --dataset DIR, --work-dir DIR, --workload-db and --record-db, or --tuned DIR",
              file=sys.stderr)
        return 2
    options = EvaluateOptions(holdout=None if args.holdout == "none" else args.holdout,
                              traces=not args.without_trace, plot=Path(args.plot) if args.plot else None,
                              cache_dir=Path(args.cache), device=args.device)
    checkpoint = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
    if args.tuned:
        from .train.evaluate import evaluate_tuned  # noqa: PLC0415  (keeps torch off this module's import)

        rows, title = evaluate_tuned(checkpoint, [Path(d) for d in args.tuned], options)
        table = format_device_table(rows, title, label="task")
        print(table)
        if args.output:
            write_rows(rows, Path(args.output), table, checkpoint)
        return 0
    rows, title, per_device = evaluate(
        checkpoint,
        datasets=[Path(d) for d in args.dataset] if args.dataset else None,
        workload_db=Path(args.workload_db) if args.workload_db else None,
        record_db=Path(args.record_db) if args.record_db else None,
        options=options,
    )
    table = format_device_table(rows, title) if per_device else format_table(rows, title)
    print(table)
    if args.output:
        write_rows(rows, Path(args.output), table, checkpoint)
    return 0


ADAPT_FLAGS = (
    Flag("--shots", "adapt", "shots", dict(type=int, help="programs to time here (at most)")),
    Flag("--selection", "adapt", "selection", dict(choices=["kmeans", "random"], help="how the shots are chosen")),
    Flag("--init", "adapt", "init", dict(choices=["nearest", "descriptor"], help="start this machine's row from the "
         "nearest known device's, or from the descriptor alone")),
    Flag("--method", "adapt", "method", dict(choices=["offset", "row"], help="shift the level by the shots' mean "
         "residual (offset), or fit the row first (row)")),
    Flag("--seed", "adapt", "seed", dict(type=int, help="seed of the choice")),
)
"""The options of ``cdmpp adapt`` that set one field of :class:`~cdmpp.train.config.AdaptConfig`."""

SERVE_FLAGS = (
    Flag("--max-body-bytes", "serve", "max_body_bytes", dict(type=int, help="largest request body (HTTP 413)")),
    Flag("--max-programs", "serve", "max_programs", dict(type=int, help="most programs per request (HTTP 422)")),
    Flag("--timeout", "serve", "timeout_s", dict(type=float, help="seconds per /predict request (HTTP 504)")),
    Flag("--estimate-timeout", "serve", "estimate_timeout_s", dict(type=float, help="seconds per /estimate request "
         "(HTTP 504)")),
    Flag("--max-tasks", "serve", "max_tasks", dict(type=int, help="most tuning tasks of an /estimate network "
         "(HTTP 422)")),
    Flag("--workers", "serve", "workers", dict(type=int, help="worker processes that parse, featurize and predict")),
    Flag("--unsafe-execute-client-tvmscript", "serve", "execute_tvmscript", dict(action="store_true", help="UNSAFE: "
         "also accept TVMScript programs, which executes the client's Python code on this machine (loopback "
         "addresses only)")),
)
"""The options of ``cdmpp serve`` that set one field of :class:`~cdmpp.serve.config.ServeConfig`."""


def _run_adapt(args) -> int:
    from .train.adapt import adapt_local, adapt_measured  # noqa: PLC0415  (keeps sklearn, torch off this module's import)

    cfg = AdaptConfig(**given_fields(args, ADAPT_FLAGS).get("adapt", {}))
    checkpoint = Path(args.checkpoint) if args.checkpoint else DEFAULT_CHECKPOINT
    if args.measured_dir:
        res = adapt_measured(checkpoint, Path(args.measured_dir), Path(args.out), cfg, Path(args.cache))
        verb = "added" if res.new_device else "refitted"
        print(
            f"{res.device_id}: {verb} as row {res.row} from all {res.shots} programs of {res.measured_dir}; "
            f"RMSE(log) on them {res.rmse_log_before:.3f} -> {res.rmse_log_after:.3f} (in-sample); "
            f"fit {res.seconds['fit']} s"
        )
        print(f"checkpoint written to {args.out}")
        return 0
    res = adapt_local(
        checkpoint,
        Path(args.source),
        Path(args.out),
        Path(args.measured),
        cfg,
        candidates=args.candidates,
        cache_dir=Path(args.cache),
        disable_avx512=args.disable_avx512,
    )
    verb = "added" if res.new_device else "refitted"
    print(
        f"{res.device_id}: {verb} as row {res.row} from {res.shots} programs timed here ({res.measured_dir}); "
        f"RMSE(log) on them {res.rmse_log_before:.3f} -> {res.rmse_log_after:.3f}; "
        f"select {res.seconds['select']} s, measure {res.seconds['measure']} s, fit {res.seconds['fit']} s"
    )
    print(f"checkpoint written to {args.out}; use it with LatencyPredictor.load({str(args.out)!r})")
    return 0


def _run_serve(args) -> int:
    import uvicorn  # noqa: PLC0415  (keeps uvicorn off this module's import)

    from .serve.app import create_app, is_loopback  # noqa: PLC0415  (keeps pydantic off this module's import)

    if args.unsafe_execute_client_tvmscript and not is_loopback(args.host):
        print(f"error: --unsafe-execute-client-tvmscript runs client code; it is allowed on a loopback address "
              f"only, not {args.host}", file=sys.stderr)
        return 2
    cfg = ServeConfig(**given_fields(args, SERVE_FLAGS).get("serve", {}))
    uvicorn.run(create_app(args.checkpoint, cfg), host=args.host, port=args.port)
    return 0


def _add_learning_parsers(sub) -> None:
    """train and evaluate."""
    s = sub.add_parser("train", help="train the transformer and the tree baseline on a held-out-network split")
    s.add_argument(
        "-d",
        "--dataset",
        required=True,
        nargs="+",
        help="a dataset folder (one device folder, or several: one model over every device); several dataset "
        "folders (for example datasets/corpus datasets/gpu) pool all their device folders",
    )
    s.add_argument("--holdout", default=None,
                   help="network to hold out for testing, a leave-family-out fold like fold-1-of-4 (`cdmpp networks --folds 4`), "
                        "or every network of a family, like family:sweep; 'none': train on all")
    s.add_argument("-o", "--out", required=True, help="checkpoint folder to write")
    s.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    s.add_argument("--no-wandb", action="store_true", help="do not log to wandb (offline by default)")
    s.add_argument("--resume", action="store_true",
                   help="continue an interrupted run of the same command from its latest finished epoch "
                        "(OUT/resume/last.ckpt, written after every epoch and removed when training ends)")
    s.add_argument("--benchmark-table", default=None, help="benchmark.md to embed in the model card")
    s.add_argument(
        "--cmd-target",
        default=None,
        metavar="DEVICE_DIR",
        help="another device's folder whose programs (features only, never latencies) are the CMD term's target "
        "domain: cross-device adaptation (needs --cmd-weight; with several device folders, a device outside "
        "training, for example the one left out with --exclude-device)",
    )
    s.add_argument(
        "--pool",
        nargs="+",
        default=None,
        metavar="DEVICE_DIR",
        help="other devices' folders whose measured programs join training (labels as measured, no device "
        "feature; their programs of the held-out and validation workloads left out): one model over several CPUs",
    )
    s.add_argument(
        "--split",
        choices=["network", "within-task", "cdmpp"],
        default="network",
        help="with several device folders: hold out --holdout on every device (network, strict); TenSet's "
        "within-task protocol (10%% of the programs of every task with >= 20 programs; within-task); or CDMPP's "
        "cross-model protocol (tasks with >= 48 programs, repeat CV <= 1%%, shared tasks on both sides; cdmpp)",
    )
    s.add_argument(
        "--exclude-device",
        nargs="+",
        default=None,
        metavar="DEVICE_ID",
        help="with a dataset of several device folders (one model over every device): leave these devices out "
        "(leave-one-device-out)",
    )
    add_model_arguments(s)
    s.set_defaults(func=_run_train)

    s = sub.add_parser("evaluate", help="score a checkpoint on a held-out network or any JSONDatabase")
    s.add_argument("-c", "--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    s.add_argument("-d", "--dataset", default=None, nargs="+",
                   help="cdmpp dataset folders (or device folders) to score on")
    s.add_argument(
        "--holdout", default="auto", help="network to score, a fold, or a family (family:sweep) ('auto': the "
        "checkpoint's held-out one; 'none': every program; with several device folders, 'validation' or 'training': "
        "that part of the checkpoint's own split)"
    )
    s.add_argument("--work-dir", default=None, help="a MetaSchedule work_dir with database_*.json")
    s.add_argument("--workload-db", default=None, help="a MetaSchedule database_workload.json")
    s.add_argument("--record-db", default=None, help="a MetaSchedule database_tuning_record.json")
    s.add_argument("--tuned", default=None, nargs="+", metavar="DIR",
                   help="tuned sets: every trial of the tuning runs (work dirs) under these folders, one row per task "
                   "(e.g. datasets/tuning/<device>/<benchmark>)")
    s.add_argument("--device", default=None,
                   help="the device a --work-dir or --tuned set was measured on (default: the device id its path "
                   "names, else this machine)")
    s.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    s.add_argument("--without-trace", action="store_true",
                   help="a checkpoint trained with trace dropout: score the programs as bare PrimFuncs, without their "
                   "schedule traces (dataset of device folders)")
    s.add_argument("--output", default=None,
                   help="also write the rows as JSON here, and the table beside it (.md, its first line naming the "
                   "checkpoint)")
    s.add_argument(
        "--plot", default=None, metavar="PNG", help="with several device folders: predicted vs measured, per device"
    )
    s.set_defaults(func=_run_evaluate)


def _add_adaptation_parsers(sub) -> None:
    """adapt."""
    s = sub.add_parser("adapt", help="teach a checkpoint this machine: time <= 64 KMeans-chosen programs, fit its device row")
    s.add_argument("-c", "--checkpoint", default=None, help="checkpoint with a device table (default: the shipped one)")
    src = s.add_mutually_exclusive_group(required=True)
    src.add_argument("-s", "--source", help="a measured device folder whose programs are the candidates")
    src.add_argument("--measured-dir", metavar="DEVICE_DIR",
                     help="a device folder measured on that device elsewhere (a GPU host, say): adapt on all its "
                          "programs, time nothing here")
    s.add_argument("-o", "--out", required=True, help="checkpoint folder to write")
    s.add_argument("--measured", default="datasets/adapt", help="dataset folder for this machine's timings")
    add_flags(s, ADAPT_FLAGS, {"adapt": AdaptConfig})
    s.add_argument("--candidates", type=int, default=2000, help="programs of --source drawn for the KMeans choice")
    s.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    s.add_argument("--disable-avx512", action="store_true", help="adapt to the AVX-512-off device of this CPU")
    s.set_defaults(func=_run_adapt)


def _add_serve_parser(sub) -> None:
    """serve."""
    s = sub.add_parser("serve", help="HTTP prediction service")
    s.add_argument("-c", "--checkpoint", default=None)
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    add_flags(s, SERVE_FLAGS, {"serve": ServeConfig})
    s.set_defaults(func=_run_serve)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``cdmpp``."""
    p = argparse.ArgumentParser(prog="cdmpp", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--debug", action="store_true", help="show the traceback of cdmpp's own errors too")
    sub = p.add_subparsers(dest="command", required=True)


    add_data_parsers(sub)
    _add_learning_parsers(sub)
    _add_adaptation_parsers(sub)
    _add_serve_parser(sub)

    add_inference_parsers(sub)
    for entry in entry_points(group=COMMAND_GROUP):  # command groups of other packages: `cdmpp bench`
        entry.load()(sub)
    return p


def _one_line_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
    print(f"cdmpp: warning: {message}", file=file or sys.stderr)


def _quiet_warnings() -> None:
    """The command line's warnings: cdmpp's own (a device chosen by a rule, say) as one line
    each, and no library noise (deprecations and future changes inside torch or TVM)."""
    warnings.showwarning = _one_line_warning
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*log_every_n_steps.*")  # epoch-level logging is what cdmpp asks for
    # "GPU available: ...", tips and the like (Lightning sets its package logger to INFO when imported, later)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``cdmpp`` console script; returns the exit status.

    The project's own errors (:class:`cdmpp.CdmppError`: bad input, corrupt files, an
    unknown device, a busy machine) print as one line and exit 2; ``--debug`` shows
    their traceback too.  Any other exception is a bug and keeps its traceback.
    """

    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    passes_rest = getattr(args, "passes_rest", False)  # a command group that parses its own arguments
    if not passes_rest and rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    _quiet_warnings()
    try:
        return int((args.func(args, rest) if passes_rest else args.func(args)) or 0)
    except CdmppError as err:
        if args.debug:
            raise
        print(f"cdmpp {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
