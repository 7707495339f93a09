"""Replay the adaptive-repeat rule on device folders' stored repeats: programs stopped early, timing saved, and how far the label moves. (``cdmpp bench repeat-check``)"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import render_table
from benchmarks.collect_rate import check_adaptive_repeats


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench repeat-check``'s arguments."""
    parser.add_argument("device_dirs", nargs="+", help="device folders (every repeat of each program is stored)")
    parser.add_argument("--first", type=int, default=4, help="repeats timed before the rule decides")
    parser.add_argument("--min-ms", type=float, default=2.0, help="programs faster than this get every repeat")
    parser.add_argument("--max-spread", type=float, default=0.02, help="(max - min) / median of the first repeats")
    parser.add_argument("--markdown", action="store_true")


def _run_repeat_check(args) -> int:

    def pct(x: float) -> str:
        return f"{100 * x:.2f}%"

    body = []
    for d in args.device_dirs:
        r = check_adaptive_repeats(Path(d), args.first, args.min_ms / 1e3, args.max_spread)
        body.append([Path(d).name, str(r.programs), pct(r.stopped), pct(r.timing_saved), pct(r.change_median),
                     pct(r.change_p90), pct(r.change_p99), pct(r.change_max)])
    print(f"rule: stop after {args.first} repeats when their median is >= {args.min_ms:g} ms and their spread "
          f"(max - min) / median <= {100 * args.max_spread:g}%")
    print(render_table(["device", "programs", "stopped", "timing saved", "label change median", "p90", "p99", "max"],
                       body, args.markdown))
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench repeat-check``."""
    return _run_repeat_check(args)
