"""Benchmark: what bfloat16 inference (``precision="bf16"``) does to a checkpoint's predictions
and to the transformer's time, device folder by device folder.

For each device folder of ``-d`` that the checkpoint knows, the first ``--programs``
programs (in the folder's record order; the checkpoint trained on most of them, so the MAPE
columns are in-distribution) are featurized once and predicted for the folder's own device
row in fp32 and in bf16.  It prints, per folder, MAPE under both precisions and their
difference in points, the median and largest ``|log(bf16 / fp32)|`` of a program, and the
forward pass's time per program under both (best of 3, on this CPU, which it names).

Run it with ``cdmpp bench precision -d datasets/corpus datasets/gpu``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import render_table
from cdmpp import dataset as ds
from cdmpp.device import host_cpu_info
from cdmpp.featurize import as_module, build_tree
from cdmpp.inference import predict_latency_array
from cdmpp.predictor import LatencyPredictor
from cdmpp.tvm_compat import Schedule


def _best_seconds(fn, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def precision_rows(roots: list[Path], checkpoint: str | None, programs: int) -> list[dict]:
    """One row per device folder the checkpoint knows: MAPE in fp32 and bf16 (percent), the
    median and largest ``|log(bf16 / fp32)|`` and the forward pass's seconds per program."""
    predictor = LatencyPredictor.load(checkpoint)
    rows = []
    for root in roots:
        for folder in ds.device_dirs(root):
            if folder.name not in predictor.devices:
                continue
            db = ds.load_device_dir(folder, max_records=programs)
            schs = [Schedule(as_module(p.record)) for p in db.programs[:programs]]
            data = predictor._leaves([build_tree(s.mod) for s in schs], predictor.trace_vectors(schs))  # noqa: SLF001
            row = predictor.table.row(folder.name)
            measured = np.array([p.latency for p in db.programs[:programs]])
            out, secs = {}, {}
            for precision in ("fp32", "bf16"):
                def run(precision=precision):
                    return predict_latency_array(predictor.model, data, device_row=row, precision=precision)
                out[precision] = run()
                secs[precision] = _best_seconds(run) / len(schs)
            mape = {k: float(np.mean(np.abs(v - measured) / measured) * 100) for k, v in out.items()}
            drift = np.abs(np.log(out["bf16"] / out["fp32"]))
            rows.append({"device": folder.name, "programs": len(schs), "mape_fp32": mape["fp32"],
                         "mape_bf16": mape["bf16"], "median_abs_log": float(np.median(drift)),
                         "max_abs_log": float(drift.max()), "us_fp32": secs["fp32"] * 1e6,
                         "us_bf16": secs["bf16"] * 1e6})
    return rows


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cdmpp bench precision``."""
    p.add_argument("-d", "--dataset", nargs="+", default=["datasets/corpus", "datasets/gpu"],
                   help="dataset folders (each device folder the checkpoint knows is scored)")
    p.add_argument("-c", "--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    p.add_argument("--programs", type=int, default=1000, help="programs per device folder (its first ones)")
    p.add_argument("--output", default=None, help="also write the rows as JSON here, and the table beside it (.md)")


def main(args: argparse.Namespace) -> int:
    """Print the table (see the module docstring)."""
    rows = precision_rows([Path(d) for d in args.dataset], args.checkpoint, args.programs)
    cpu = host_cpu_info()[0]
    threads = torch.get_num_threads()
    body = [[r["device"], str(r["programs"]), f"{r['mape_fp32']:.2f}%", f"{r['mape_bf16']:.2f}%",
             f"{r['mape_bf16'] - r['mape_fp32']:+.2f}", f"{r['median_abs_log']:.4f}", f"{r['max_abs_log']:.4f}",
             f"{r['us_fp32']:.0f}", f"{r['us_bf16']:.0f}"] for r in rows]
    heads = ["device folder", "programs", "MAPE fp32", "MAPE bf16", "points", "median |log bf16/fp32|",
             "max |log bf16/fp32|", "us/program fp32", "us/program bf16"]
    table = render_table(heads, body, markdown=True, left=1)
    note = (f"bf16 against fp32 inference, {args.checkpoint or 'shipped checkpoint'}, the first {args.programs} "
            f"programs of each device folder (in-distribution); forward pass timed on {cpu} ({threads} threads)")
    print(note + "\n\n" + table)
    if args.output:
        Path(args.output).write_text(json.dumps({"note": note, "rows": rows}, indent=1), encoding="utf-8")
        Path(args.output).with_suffix(".md").write_text(note + "\n\n" + table + "\n", encoding="utf-8")
    return 0
