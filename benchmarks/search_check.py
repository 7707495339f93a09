"""The collector's evolutionary search at several populations: search seconds per call and the measured latency of what it draws. (``cdmpp bench search-check``)"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.collect_rate import (
    SearchCheckConfig,
    format_search_check,
    run_search_check,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench search-check``'s arguments."""
    parser.add_argument("dataset", help="dataset folder with this CPU's device folder (read only)")
    parser.add_argument("-n", "--networks", nargs="+", default=["resnet_50-b1", "mobilenet_v2-b1", "bert_base-b1s128"])
    parser.add_argument("--tasks-per-network", type=int, default=2)
    parser.add_argument("--populations", type=int, nargs="+", default=[128, 64, 32])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="runs/search-check")


def _run_search_check(args) -> int:


    cfg = SearchCheckConfig(dataset=Path(args.dataset), networks=args.networks,
                            tasks_per_network=args.tasks_per_network, populations=tuple(args.populations),
                            batch=args.batch, seed=args.seed)
    rows = run_search_check(cfg)
    print(format_search_check(rows))
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "search_check.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    (out / "search_check.md").write_text(format_search_check(rows, markdown=True) + "\n", encoding="utf-8")
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench search-check``."""
    return _run_search_check(args)
