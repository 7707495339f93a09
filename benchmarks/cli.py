"""``cdmpp bench <name>``: the benchmarks and studies, each loaded only when called.

Each bench module has ``add_arguments(parser)`` and ``main(args) -> int``; this module
names them and imports the one asked for.
"""

from __future__ import annotations

import argparse
import importlib
import sys

BENCHES = {
    "tune": ("tune_cli", "MetaSchedule tuning of a network's largest tasks (or a whole network): TVM's XGBoost model "
             "against cdmpp's plugin"),
    "truth-check": ("truth_check", "whole networks: measured end to end vs summed measured kernels vs the estimate"),
    "selection-study": ("selection_study", "the winner's curse: the estimate on each tuner's picks, and a correction "
                        "for the picks learned on other networks"),
    "input-values": ("input_values", "a kernel's latency on TVM's random fill against network-like input values "
                     "(GELU's erf takes the C library's slow path on TVM's fill)"),
    "warm-protocol": ("warm_protocol", "which timing protocol a kernel runs at inside a network: cold / warm labels "
                      "per collection protocol, in-network / retimed times (reads stored records only)"),
    "deployed-import": ("deployed_import", "a network with its weights as per-call inputs against it imported as "
                        "deployed (weight-only kernels at load): tasks, end to end, profile"),
    "calibrate": ("calibrate", "calibrate a checkpoint's 10-90% intervals on its validation workloads; report coverage"),
    "speed": ("speed", "time one 512-candidate predict call by stage, beside TVM's XGBModel"),
    "precision": ("precision", "bf16 against fp32 inference: each device folder's MAPE and the forward pass's time"),
    "serve-load": ("serve_load", "load test: N clients for S seconds against a local cdmpp serve"),
    "collect-rate": ("collect_rate", "programs per minute: plain TVM, an earlier collector and this one"),
    "search-check": ("search_check", "the collector's evolutionary search at several populations"),
    "repeat-check": ("repeat_check", "replay the adaptive-repeat rule on device folders' stored repeats"),
    "adapt-table": ("adapt_table", "leave-one-device-out: zero-shot and after 16-64 shots"),
    "epoch-time": ("epoch_time", "seconds per training epoch over a whole dataset, per precision"),
    "featurize-rate": ("featurize_rate", "featurized programs per second, in one process and on a pool"),
    "fit-study": ("fit_study", "what limits the model: fit, validation, fast end, noise, per lever"),
    "import-graph": ("import_graph", "draw the imports between the package's layers (docs/plots/import-layers.png)"),
    "cli-reference": ("cli_reference", "write docs/cli.md, every option of every command, from the parsers"),
    "table": ("table", "train and score every model (transformer, ablations, trees, MLP, FLOPs) on the same "
              "leave-one-network-out and random splits"),
}
"""Each bench's module (in this package) and help line."""


def usage() -> str:
    """The list of benches, one line each, as ``cdmpp bench --help`` prints it."""
    width = max(map(len, BENCHES))
    lines = ["usage: cdmpp bench NAME [options]   (cdmpp bench NAME --help: that bench's options)", "",
             "benchmarks and studies of cdmpp (the benchmarks package):"]
    lines += [f"  {name:<{width}}  {help_line}" for name, (_, help_line) in BENCHES.items()]
    return "\n".join(lines)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` group to ``cdmpp``'s subcommands (the ``cdmpp.commands`` entry point
    of this package, :data:`cdmpp.cli.COMMAND_GROUP`); a bench parses its own arguments."""
    s = sub.add_parser("bench", add_help=False, help="benchmarks and studies (`cdmpp bench --help` lists them)")
    s.add_argument("bench_name", nargs="?", default=None, metavar="NAME")
    s.set_defaults(func=lambda args, rest: main(args.bench_name, rest), passes_rest=True)


def main(name: str | None, argv: list[str]) -> int:
    """Run the bench ``name`` with its command-line arguments ``argv``; returns the exit status
    (2 and the list of benches for a missing or unknown name)."""
    if name in ("-h", "--help") or (name is None and ("-h" in argv or "--help" in argv)):
        print(usage())
        return 0
    if name not in BENCHES:
        print(usage(), file=sys.stderr)
        if name is not None:
            print(f"cdmpp bench: error: no bench named {name!r}", file=sys.stderr)
        return 2
    module_name, help_line = BENCHES[name]
    module = importlib.import_module(f"{__package__}.{module_name}")
    parser = argparse.ArgumentParser(prog=f"cdmpp bench {name}",
                                     description=(module.__doc__ or help_line).split("\n\n")[0])
    module.add_arguments(parser)
    return int(module.main(parser.parse_args(argv)) or 0)
