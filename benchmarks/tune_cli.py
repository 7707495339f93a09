"""``cdmpp bench tune``: its arguments and the command (the tuning runs are in :mod:`benchmarks.tune`)."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import write_csv_and_markdown
from benchmarks.tune import (
    COST_MODELS,
    TuneBenchmarkConfig,
    format_tune_benchmark,
    ratio_summary,
    reach_table,
    run_tune_benchmark,
    tuning_curves,
    tuning_walls,
    with_reference,
    write_tune_benchmark,
)
from benchmarks.tune_network import (
    NetworkTuneConfig,
    format_network_tuning,
    network_curve_panels,
    run_network_tuning,
)
from benchmarks.tune_table import runs_checkpoint_line
from cdmpp.device import local_cpu
from cdmpp.train.report import checkpoint_line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench tune``'s arguments."""
    parser.add_argument("-d", "--dataset", help="device folder whose manifest lists the network")
    parser.add_argument("--network", help="network whose tasks are tuned (several: comma-separated): one of the manifest's, or one "
                        "outside the zoo (convnext_tiny-b1, gpt2_small-b1s128; its tasks are extracted for this CPU)")
    parser.add_argument("--whole-network", metavar="NET", default=None,
                        help="tune every task of a network (a zoo network or one outside the zoo, e.g. "
                        "llama_1024-b1s128) with tune_relax (a global budget of --trials), then compile it with "
                        "each database and time it end to end")
    parser.add_argument("--tasks", type=int, default=3, help="its largest tasks by weight x FLOPs")
    parser.add_argument("--task", action="append", default=[], metavar="NET:TASK",
                        help="also tune this task (a task name or its prefix, e.g. mobilenet_v2-b1:fused_conv2d7); repeatable")
    parser.add_argument("--trials", type=int, default=64, help="measured trials per task and cost model")
    parser.add_argument("--trials-per-iter", type=int, default=16)
    parser.add_argument("--trials-for", action="append", default=[], metavar="MODEL=N",
                        help="another budget for one cost model, e.g. xgb=512 (the reference the others must reach)")
    parser.add_argument("--cost-models", nargs="+", default=["xgb", "cdmpp"], choices=list(COST_MODELS),
                        help="xgb, cdmpp, random, or the plugin's online-update ablation: cdmpp-static (no update), "
                        "cdmpp-level (level shift only), cdmpp-leaves (residual trees without the trace)")
    parser.add_argument("-c", "--checkpoint", default=None, help="checkpoint of the cdmpp plugin (default: shipped)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[], help="several seeds, one run each")
    parser.add_argument("--output", default="runs/tune-benchmark", help="work dirs and tune_benchmark.{csv,md}")
    parser.add_argument("--plot", default=None, metavar="PNG", help="also plot best latency against trials per task")
    parser.add_argument("--every", type=int, default=16, metavar="K",
                        help="with --reference: write every run's best-so-far after every K trials (tune_curves.csv)")
    parser.add_argument("--reference", default=None, metavar="DIR",
                        help="another tune-benchmark output whose XGBoost runs (e.g. --trials-for xgb=512) are the "
                        "yardstick of the reach table and the plot (the output itself: its own XGBoost runs), and "
                        "print the summary of ratios to it")
    parser.add_argument("--retime", action="store_true",
                        help="with --reference: build and time again, now and one after the other (task by task), "
                        "each run's best record at the trial counts the held-out table compares (both outputs must "
                        "be of this machine), and compute that table from these timings (tune_retimed.csv): runs "
                        "measured on different days compare")
    parser.add_argument("--retime-rounds", type=int, default=1, metavar="N",
                        help="with --retime: time every compared record N times, in whole rounds one after the other, "
                        "and keep its median (each round's timing is a column of tune_retimed.csv)")


def _plugin_line(args) -> str | None:
    """The checkpoint line of the output's plugin runs (:func:`benchmarks.tune_table.runs_checkpoint_line`:
    the checkpoint each run was tuned with), or ``None`` when no cost model of the command is
    a cdmpp checkpoint and no run of the output records one (XGBoost and random scores only)."""
    given = None if all(m in ("xgb", "random") for m in args.cost_models) else checkpoint_line(
        Path(args.checkpoint) if args.checkpoint else None)
    return runs_checkpoint_line(Path(args.output), given)


def _run_tune_network(args) -> int:

    rows = []
    for seed in args.seeds or [args.seed]:
        cfg = NetworkTuneConfig(
            network=args.whole_network,
            trials=args.trials,
            trials_per_iter=args.trials_per_iter,
            cost_models=tuple(args.cost_models),
            checkpoint=Path(args.checkpoint) if args.checkpoint else None,
            seed=seed,
        )
        rows += run_network_tuning(Path(args.output), cfg)
    print(format_network_tuning(rows))
    csv_path, md_path = write_csv_and_markdown(rows, Path(args.output), "tune_network",
                                               format_network_tuning(rows, markdown=True), _plugin_line(args))
    print(f"written: {csv_path}, {md_path}")
    if args.plot:
        from cdmpp.train.plots import plot_tuning_curves  # noqa: PLC0415  (only on the branch that needs it)

        plot_tuning_curves(network_curve_panels(Path(args.output), args.whole_network, min_trials=2),
                           f"MetaSchedule tune_relax\non {local_cpu().device_id}", Path(args.plot),
                           ylabel="searched tasks' sum")
        print(f"plot written to {args.plot}")
    return 0


def _run_tune_benchmark(args) -> int:

    if args.whole_network:
        return _run_tune_network(args)
    if args.retime and not args.reference:
        print("error: --retime times the runs of --output and --reference again: give --reference", file=sys.stderr)
        return 2
    if args.retime_rounds < 1 or (args.retime_rounds > 1 and not args.retime):
        print(f"error: --retime-rounds {args.retime_rounds}: give a count of at least 1, with --retime", file=sys.stderr)
        return 2
    if not args.dataset or not (args.network or args.task):
        print("error: cdmpp bench tune needs --dataset and --network (or --whole-network NET)", file=sys.stderr)
        return 2
    cfg = TuneBenchmarkConfig(
        network=args.network or "",
        task_names=tuple(args.task),
        model_trials=tuple(args.trials_for),
        tasks=args.tasks,
        trials=args.trials,
        trials_per_iter=args.trials_per_iter,
        cost_models=tuple(args.cost_models),
        checkpoint=Path(args.checkpoint) if args.checkpoint else None,
        seed=args.seed,
        seeds=tuple(args.seeds),
        checkpoints_at=tuple(k for k in (args.trials // 8, args.trials // 4, args.trials // 2, args.trials) if k > 0),
    )
    rows = run_tune_benchmark(Path(args.dataset), Path(args.output), cfg)
    print(format_tune_benchmark(rows))
    csv_path, md_path = write_tune_benchmark(rows, Path(args.output), _plugin_line(args))
    print(f"written: {csv_path}, {md_path}")
    curves, yardstick = tuning_curves(Path(args.output)), "xgb"
    # --reference naming the output itself: its own XGBoost runs are the yardstick, not added twice
    own = args.reference and Path(args.reference).resolve() == Path(args.output).resolve()
    if curves and args.reference and not own:
        curves, yardstick = with_reference(curves, tuning_curves(Path(args.reference)))
    if curves:
        print(reach_table(curves, markdown=False, yardstick=yardstick))
        if args.reference:  # the benchmark's summary: each seed's mean ratio to the reference, and wall times
            at = tuple(k for k in (args.trials // 8, args.trials // 4, args.trials // 2, args.trials) if k > 0)
            walls = tuning_walls(Path(args.output), args.trials)
            if not own:
                walls, _ = with_reference(walls, tuning_walls(Path(args.reference), args.trials), name=yardstick)
            print(ratio_summary(curves, yardstick=yardstick, at=at, markdown=False, walls=walls))
            plugins = [m for m in args.cost_models if m != "xgb"] or ["cdmpp"]
            _write_held_out_table(Path(args.output), Path(args.reference), args.every, plugins, _plugin_line(args),
                                 args.retime, args.retime_rounds)
        if args.plot:
            from cdmpp.train.plots import plot_tuning_curves  # noqa: PLC0415  (only on the branch that needs it)

            title = f"MetaSchedule tune_tir on {local_cpu().device_id}"
            if args.retime:  # the curves are each run's own timings; only the held-out table is retimed
                title += ": recorded latencies (the held-out table's records are timed again)"
            plot_tuning_curves(curves, title, Path(args.plot), yardstick=yardstick, log_trials=yardstick != "xgb")
            print(f"plot written to {args.plot}")
    return 0


def _write_held_out_table(out_dir: Path, reference: Path, every: int, plugins: Sequence[str] = ("cdmpp",),
                         first_line: str | None = None, retime: bool = False, rounds: int = 1) -> None:
    """Print the held-out table (:func:`benchmarks.tune_table.held_out_table`) of each of
    ``plugins`` and write them (``tune_heldout.md``, one table per cost model, below
    ``first_line`` when given) and every run's best-so-far every ``every`` trials
    (``tune_curves.csv``, the reference's runs included) into ``out_dir``.  With
    ``retime``, the compared records are timed again first
    (:func:`benchmarks.tune_table.retime_held_out`, ``rounds`` times each, median kept;
    ``tune_retimed.csv``) and the tables are computed from those timings."""
    from .tune_table import curve_rows, held_out_table, retime_held_out  # noqa: PLC0415  (only on the branch that needs it)

    retimed = None
    if retime:
        retimed, timed = retime_held_out(out_dir, reference, plugins, rounds=rounds)
        columns = ["task", "cost_model", "seed", "trials", "recorded_s", "retimed_s"]
        columns += [f"round{i}_s" for i in range(1, rounds + 1)] if rounds > 1 else []
        with open(out_dir / "tune_retimed.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(timed)
        for model in dict.fromkeys(r["cost_model"] for r in timed):
            ratios = [r["retimed_s"] / r["recorded_s"] for r in timed if r["cost_model"] == model and r["retimed_s"]]
            if ratios:
                print(f"{model}: retimed / recorded, median over {len(ratios)} records: {np.median(ratios):.2f}")
        if rounds > 1:
            # a record compared at several trial counts is one row per count: count its timings once
            timings = {(r["task"], r["cost_model"], r["seed"], r["recorded_s"]): t for r in timed
                       if len(t := [r[f"round{i}_s"] for i in range(1, rounds + 1) if r[f"round{i}_s"]]) > 1}
            spread = [max(t) / min(t) for t in timings.values()]
            if spread:
                print(f"slowest / fastest of a record's {rounds} rounds: median {np.median(spread):.2f}, "
                      f"largest {max(spread):.2f}")
        timed_how = "one after the other in one run" if rounds == 1 else f"in {rounds} rounds in one run, median kept"
        first_line = (f"{first_line}\n\n" if first_line else "") + (
            f"Every ratio is of records built and timed again {timed_how} (tune_retimed.csv).")
    tables = [held_out_table(out_dir, reference, plugin=p, retimed=retimed)[0] for p in plugins]
    table = "\n\n".join(tables)
    print(table)
    (out_dir / "tune_heldout.md").write_text((f"{first_line}\n\n" if first_line else "") + table + "\n",
                                             encoding="utf-8")
    rows = curve_rows([out_dir] if out_dir.resolve() == reference.resolve() else [out_dir, reference], every)
    csv_path = out_dir / "tune_curves.csv"
    with open(csv_path, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=["task", "cost_model", "seed", "trials", "best_s", "wall_s"])
        w.writeheader()
        w.writerows(rows)
    print(f"written: {out_dir / 'tune_heldout.md'}, {csv_path}")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench tune``."""
    return _run_tune_benchmark(args)
