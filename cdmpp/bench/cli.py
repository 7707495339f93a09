"""``cdmpp bench <name>``: the benchmarks and studies, each registering its own arguments."""

from __future__ import annotations

import argparse
import importlib

BENCHES = {
    "tune": ("cdmpp.bench.tune_cli", "MetaSchedule tuning of a network's largest tasks (or a whole network): TVM's "
             "XGBoost model against cdmpp's plugin"),
    "truth-check": ("cdmpp.bench.truth_check", "whole networks: measured end to end vs summed measured kernels vs "
                    "the estimate"),
    "calibrate": ("cdmpp.bench.calibrate", "calibrate a checkpoint's 10-90%% intervals on its validation workloads; "
                  "report coverage"),
    "speed": ("cdmpp.bench.speed", "time one 512-candidate predict call by stage, beside TVM's XGBModel"),
    "serve-load": ("cdmpp.bench.serve_load", "load test: N clients for S seconds against a local cdmpp serve"),
    "collect-rate": ("cdmpp.bench.collect_rate", "programs per minute: plain TVM, an earlier collector and this one"),
    "search-check": ("cdmpp.bench.search_check", "the collector's evolutionary search at several populations"),
    "repeat-check": ("cdmpp.bench.repeat_check", "replay the adaptive-repeat rule on device folders' stored repeats"),
    "adapt-table": ("cdmpp.bench.adapt_table", "leave-one-device-out: zero-shot and after 16-64 shots"),
    "epoch-time": ("cdmpp.bench.epoch_time", "seconds per training epoch over a whole dataset, per precision"),
    "featurize-rate": ("cdmpp.bench.featurize_rate", "featurized programs per second, in one process and on a "
                       "pool"),
    "fit-study": ("cdmpp.bench.fit_study", "what limits the model: fit, validation, fast end, noise, per lever"),
}
"""Each bench's module (with ``add_arguments(parser)`` and ``main(args) -> int``) and help line."""


def add_bench_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``bench`` group, and one subcommand per entry of :data:`BENCHES`, to ``sub``."""
    group = sub.add_parser("bench", help="benchmarks and studies (not needed to use cdmpp)")
    benches = group.add_subparsers(dest="bench", required=True)
    for name, (module, help_line) in BENCHES.items():
        mod = importlib.import_module(module)
        s = benches.add_parser(name, help=help_line, description=(mod.__doc__ or "").split("\n\n")[0])
        mod.add_arguments(s)
        s.set_defaults(func=mod.main)
