"""Benchmark: the cost of one cost-model call inside a tuning loop.

MetaSchedule's evolutionary search asks its cost model about 512 candidates at a time,
about 5 times per search iteration (``shared/notes/tvm-0.27.md``).  This benchmark times
such a call of :class:`cdmpp.LatencyPredictor` on programs of a dataset, stage by stage:

* ``PerStoreFeature``: TVM's 164 per-store features (TVM's XGBoost model pays this too);
* ``compact AST``: the loop-nest walk that builds the leaves (:func:`cdmpp.featurize.build_tree`);
* ``transformer``: collating the leaves and the model's forward pass;
* ``predict (end to end)``: :meth:`LatencyPredictor.predict`, all of the above.

Run it with ``python -m cdmpp.serve.speed -d datasets/slice``; it prints milliseconds per
call and microseconds per candidate (best of ``--repeats``).  Rebuilding the programs from
their tuning records is not timed: in a tuning loop the candidates arrive built.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np


def _best_of(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def predict_call_seconds(
    dataset_dir: Path, checkpoint: str | None = None, candidates: int = 512, repeats: int = 3, seed: int = 0
) -> tuple[int, dict[str, float]]:
    """Seconds one predict call on ``candidates`` programs takes, per stage (best of ``repeats``).

    Args:
        dataset_dir: a dataset folder (its first device folder is used) or a device folder.
        checkpoint: checkpoint folder; ``None`` uses the shipped one.
        candidates: programs per call, drawn at random from the folder's programs.
        repeats: timings per stage; the fastest is kept.
        seed: seed of the draw.

    Returns:
        ``(programs per call, {"PerStoreFeature": s, "compact AST": s, "transformer": s,
        "predict (end to end)": s})``, in seconds per call; fewer programs than
        ``candidates`` when the folder has fewer.

    Raises:
        DatasetError: no device folder or no measured program there.
    """
    # pylint: disable=import-outside-toplevel
    import torch

    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module, build_tree
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.tvm_compat import Target, per_store_features

    db = ds.load_device_dir(ds.device_dirs(Path(dataset_dir))[0])
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    pick = np.random.default_rng(seed).choice(len(db.programs), size=min(candidates, len(db.programs)), replace=False)
    mods = [as_module(db.programs[i].record) for i in pick]
    target = Target(db.manifest["device"]["target"])
    predictor = LatencyPredictor.load(checkpoint)
    rows = per_store_features(target, mods)
    trees = [build_tree(m, r) for m, r in zip(mods, rows)]
    n = len(trees)

    return n, {
        "PerStoreFeature": _best_of(lambda: per_store_features(target, mods), repeats),
        "compact AST": _best_of(lambda: [build_tree(m, r) for m, r in zip(mods, rows)], repeats),
        "transformer": _best_of(lambda: predictor.predict_trees(trees), repeats),
        "predict (end to end)": _best_of(lambda: predictor.predict(mods, target), repeats),
    }


def main(argv: list[str] | None = None) -> int:
    """Print the stage timings of one predict call (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m cdmpp.serve.speed", description=__doc__.split("\n\n")[0])
    p.add_argument("-d", "--dataset", default="datasets/slice")
    p.add_argument("-c", "--checkpoint", default=None)
    p.add_argument("--candidates", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    n, secs = predict_call_seconds(Path(args.dataset), args.checkpoint, args.candidates, args.repeats)
    print(f"one predict call on {n} candidates ({os.cpu_count()} cores, best of {args.repeats})")
    print(f"{'stage':<24}{'ms / call':>12}{'us / candidate':>16}")
    for name, s in secs.items():
        print(f"{name:<24}{s * 1e3:>12.1f}{s * 1e6 / n:>16.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
