"""Seconds per training epoch over a whole dataset, for each training precision.

One process loads the featurized corpus once (from the cache), builds the shipped
recipe's inputs (the leaves, every loop and the schedule trace as tokens, the log-sum-exp
head; ``--recipe trace-mean``: the leaves and the trace token, mean-pooled), then trains
the transformer for
``--epochs`` epochs with each precision in turn on the same strict split (the held-out
network's workloads out), and prints wall seconds per epoch: the training pass and its
validation pass, the way ``cdmpp train`` spends them. bf16 autocast pays where the CPU
has AVX-512 BF16 (Zen 4, Zen 5, Emerald Rapids) or on a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from pathlib import Path

from benchmarks import write_result
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.featurize.parallel import default_workers
from cdmpp.model import ModelConfig
from cdmpp.train.config import PRECISIONS, TrainConfig, resolve_precision
from cdmpp.train.devices import load_corpus, split_corpus
from cdmpp.train.fit import fit_transformer

RECIPES = {
    "shipped": {},
    "loops-lse": {"loop_tokens": True, "pooling": "lse"},
    "trace-mean": {"loop_tokens": False, "pooling": "mean"},
}
"""Model-config changes of each timed recipe, on top of the shipped one (:class:`~cdmpp.model.ModelConfig`'s defaults)."""

ENCODERS = ("packed", "padded")
"""How the encoder meets a batch (:attr:`cdmpp.model.LatencyTransformer.pack_tokens`)."""


def time_epochs(
    datasets: list[Path], cache_dir: Path, precisions: list[str], epochs: int = 1, recipe: str = "shipped",
    holdout: str | None = "resnet_50-b1", log=print, length_pools: tuple[int, ...] = (0,),
    encoders: tuple[str, ...] = ("packed",),
) -> dict:
    """Train the transformer for ``epochs`` epochs per precision and batching, and time each run.

    Args:
        length_pools: :attr:`~cdmpp.train.config.TrainConfig.length_pool` values to time
            (0: freely shuffled batches; k: batches of similar token count from pools of k).
        encoders: ``"packed"`` (the encoder on the real tokens only, as trained) and/or
            ``"padded"`` (``nn.TransformerEncoder`` on the padded batch, the same function).

    Returns:
        ``{"device", "recipe", "programs", "train_programs", "val_programs", "epochs",
        "rows"}``; each row has ``precision`` (as given), ``resolved`` (what Lightning
        got), ``length_pool``, ``encoder``, ``seconds`` (wall seconds of the whole fit) and
        ``seconds_per_epoch``.

    Raises:
        InputError: an unknown recipe, precision or encoder, ``epochs < 1`` or a negative pool.
        DatasetError: no measured device folder under ``datasets``.
    """

    if recipe not in RECIPES:
        raise InputError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES)}")
    bad = [p for p in precisions if p not in PRECISIONS]
    if bad or not precisions:
        raise InputError(f"precisions must be among {', '.join(PRECISIONS)}, got {', '.join(precisions) or 'none'}")
    if epochs < 1:
        raise InputError(f"epochs must be >= 1, got {epochs}")
    if not encoders or set(encoders) - set(ENCODERS):
        raise InputError(f"encoders must be among {', '.join(ENCODERS)}, got {', '.join(encoders) or 'none'}")
    if not length_pools or min(length_pools) < 0:
        raise InputError(f"length pools must be >= 0, got {list(length_pools)}")
    model_config = dataclasses.replace(ModelConfig(), **RECIPES[recipe])
    t0 = time.time()
    corpus = load_corpus(datasets, cache_dir, (), progress=False, loops=model_config.loop_tokens,
                         workers=default_workers())
    model_config = dataclasses.replace(model_config, num_devices=len(corpus.devices))
    corpus = corpus.for_model(model_config)
    model_config = dataclasses.replace(model_config, feature_dim=corpus.data.x.shape[1])
    split = split_corpus(corpus, holdout, seed=0)
    log(f"{len(corpus.data)} programs ({len(split.train)} training, {len(split.val)} validation) ready in "
        f"{time.time() - t0:.0f} s")
    result = {"device": local_cpu().device_id, "recipe": recipe, "model": dataclasses.asdict(model_config),
              "programs": len(corpus.data), "train_programs": int(len(split.train)),
              "val_programs": int(len(split.val)), "epochs": epochs, "rows": []}
    for precision, pool, encoder in itertools.product(precisions, length_pools, encoders):
        train_config = TrainConfig(epochs=epochs, precision=precision, length_pool=pool)
        t0 = time.time()
        fit_transformer(corpus.data, split, model_config, train_config, None, use_wandb=False, progress=False,
                        device_descriptors=corpus.descriptors(), padded_encoder=encoder == "padded")
        secs = time.time() - t0
        result["rows"].append({"precision": precision, "resolved": resolve_precision(precision),
                               "length_pool": pool, "encoder": encoder, "seconds": round(secs, 1),
                               "seconds_per_epoch": round(secs / epochs, 1)})
        log(result["rows"][-1])
    return result


def format_epoch_times(result: dict) -> str:
    """The timings as a markdown table."""
    lines = [f"{result['device']}, recipe {result['recipe']}: {result['train_programs']} training and "
             f"{result['val_programs']} validation programs, {result['epochs']} epoch(s) per precision", "",
             "| precision | Lightning precision | length pool | encoder | seconds per epoch |",
             "| --- | --- | ---: | --- | ---: |"]
    lines += [f"| {r['precision']} | {r['resolved']} | {r.get('length_pool', 0)} | {r.get('encoder', 'padded')} "
              f"| {r['seconds_per_epoch']:.1f} |" for r in result["rows"]]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench epoch-time``'s arguments on an ``argparse`` parser."""
    parser.add_argument("-d", "--dataset", nargs="+", required=True, help="dataset folder(s) of device folders")
    parser.add_argument("--precisions", nargs="+", default=["32-true", "bf16-mixed"], choices=PRECISIONS)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--recipe", default="shipped", choices=list(RECIPES))
    parser.add_argument("--length-pools", nargs="+", type=int, default=[0],
                        help="batchings to time: 0 shuffles programs freely, k draws batches of similar token count "
                             "from pools of k batches (TrainConfig.length_pool)")
    parser.add_argument("--encoders", nargs="+", default=["packed"], choices=ENCODERS,
                        help="packed: the encoder on the real tokens only (as trained); padded: "
                             "nn.TransformerEncoder on the padded batch, the same function with more work")
    parser.add_argument("--holdout", default="resnet_50-b1", help="network whose workloads stay out of training")
    parser.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    parser.add_argument("-o", "--out", default=None, help="JSON file to write (the markdown table goes beside it)")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench epoch-time``."""
    result = time_epochs([Path(d) for d in args.dataset], Path(args.cache), list(args.precisions), args.epochs,
                         args.recipe, args.holdout, length_pools=tuple(args.length_pools),
                         encoders=tuple(args.encoders))
    table = format_epoch_times(result)
    print(table)
    if args.out:
        write_result(Path(args.out), result, table)
    return 0
