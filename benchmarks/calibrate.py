"""Calibrate a checkpoint's 10-90% prediction intervals on its validation workloads, and report their coverage. (``cdmpp bench calibrate``)"""

from __future__ import annotations

import argparse
from pathlib import Path

from cdmpp.train.uncertainty import (
    IntervalConfig,
    calibrate_checkpoint,
    format_coverage,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench calibrate``'s arguments."""
    parser.add_argument("-c", "--checkpoint", required=True, help="a checkpoint of cdmpp train -d DATASET")
    parser.add_argument("-d", "--dataset", nargs="+", default=["datasets/corpus"],
                        help="the dataset folder(s) it was trained on")
    parser.add_argument("--passes", type=int, default=16, help="MC-dropout passes per program")
    parser.add_argument("--method", default="mc-normalized", choices=["mc-normalized", "mc-raw", "constant"],
                        help="the interval the checkpoint serves")
    parser.add_argument("--dry-run", action="store_true", help="report coverage only; leave the checkpoint as it is")
    parser.add_argument("--cache", default=".cdmpp-cache", help="feature cache folder")


def _run_calibrate(args) -> int:

    results = calibrate_checkpoint(
        Path(args.checkpoint), [Path(d) for d in args.dataset], Path(args.cache), IntervalConfig(passes=args.passes),
        args.method, progress=True, write=not args.dry_run,
    )
    for key, (calibration, report) in results.items():
        print(f"{key}: {calibration['calibrated_on']}")
        print(format_coverage(report, calibration))
        print()
    if not args.dry_run:
        print(f"calibration ({args.method}) written to {Path(args.checkpoint) / 'config.json'}")
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench calibrate``."""
    return _run_calibrate(args)
