"""Leave-one-device-out: a device the checkpoint never saw, zero-shot and after 16-64 shots (offset and fitted row, KMeans and random shots). (``cdmpp bench adapt-table``)"""

from __future__ import annotations

import argparse
from pathlib import Path

from cdmpp import dataset as ds
from cdmpp.checkpoint import load_checkpoint
from cdmpp.featurize.trace import model_inputs
from cdmpp.train.adapt import adapt_table
from cdmpp.train.devices import device_of_manifest
from cdmpp.train.evaluate import load_featurized
from cdmpp.train.report import format_table, task_weights, write_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench adapt-table``'s arguments."""
    parser.add_argument("-c", "--checkpoint", required=True, help="a checkpoint trained with --exclude-device DEVICE")
    parser.add_argument("-d", "--dataset", required=True, help="DEVICE's folder (its measured programs are the shots)")
    parser.add_argument("--shots", type=int, nargs="+", default=[16, 32, 64])
    parser.add_argument("--selection", nargs="+", choices=["kmeans", "random"], default=["kmeans", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    parser.add_argument("--output", default=None, help="also write the rows as JSON here")
    parser.add_argument("--plot", default=None, metavar="PNG", help="also plot MAPE against the number of shots")


def _run_adapt_table(args) -> int:

    model, meta = load_checkpoint(Path(args.checkpoint))
    db, data = load_featurized(Path(args.dataset), Path(args.cache), progress=False)
    data = model_inputs(model.config, data, ds.device_dirs(Path(args.dataset))[:1])  # a trace-token checkpoint reads the records' traces
    device = device_of_manifest(db.manifest, Path(args.dataset))
    if any(d["device_id"] == device.device_id for d in meta.get("devices", [])):
        if device.device_id not in meta.get("excluded_devices", []):
            raise ds.DatasetError(
                f"{args.checkpoint} was trained on {device.device_id}; train one with --exclude-device {device.device_id}"
            )
        # Left out of training, its row added afterwards (`cdmpp adapt --measured-dir`): score as before that row.
        meta = {**meta, "devices": [d for d in meta["devices"] if d["device_id"] != device.device_id]}
        print(f"{device.device_id} was left out of training; its row added afterwards is ignored here")
    rows = adapt_table(
        model, meta, data, device, task_weights({db.device_id: db.manifest}, data.workload_keys, None),
        tuple(args.shots), tuple(args.selection), args.seed,
    )
    title = f"device {device.device_id}, unseen by {args.checkpoint}: zero-shot and after shots"
    table = format_table(rows, title)
    print(table)
    if args.output:
        write_rows(rows, Path(args.output), table, Path(args.checkpoint) if args.checkpoint else None)
    if args.plot:
        from cdmpp.train.plots import plot_error_vs_shots  # noqa: PLC0415  (only on the branch that needs it)

        plot_error_vs_shots(rows, f"{device.device_id} (left out of training): MAPE after shots", Path(args.plot))
        print(f"plot written to {args.plot}")
    return 0


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench adapt-table``."""
    return _run_adapt_table(args)
