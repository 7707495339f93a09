"""What limits the latency model: a diagnosis on validation workloads (``cdmpp bench fit-study``).

For a set of device folders, one split by workload key (a tenth of the workloads is
validation on every device; nothing is held out for testing, so no test network is
looked at; with ``fold``, a leave-family-out fold is held out too and scored as a part
of its own, :mod:`cdmpp.train.folds`), and for each *lever* (a change of the training recipe), the study trains
the transformer and reports on the training programs (the fit) and on the validation
workloads: MAPE, median APE, Kendall tau and the fast-end measures of
:func:`cdmpp.train.metrics.fast_end`.  Beside them:

* the **noise ceiling**: a second timing of stored programs (``remeasured.jsonl``)
  against the first, scored like a prediction;
* **feature ambiguity**: programs whose leaf features equal those of another program of
  their task, and how far apart their latencies are (no model on these features can
  tell them apart);
* the **trees** (XGBoost over summed ``PerStoreFeature`` rows) on the same split;
* with ``residual_inputs``, an **input check** per lever: gradient-boosted trees fitted
  to the transformer's log residual on its training programs, from the schedule trace's
  decisions (``"trace"``, :mod:`cdmpp.featurize.trace`) or from the summed
  ``PerStoreFeature`` rows (``"psf"``, the control), and the corrected predictions
  scored like the others.  Inputs that carry what the leaves lack, and that carries
  over to new workloads, improve the validation rows.

The result is a JSON document (``rows``, ``noise``, ``ambiguity``, ``config``) and a
markdown table (:func:`format_study`).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xgboost as xgb

from benchmarks import write_result
from benchmarks.levers import LEVERS, Lever
from benchmarks.trace_steps import folder_trace_steps, with_trace_sequence
from cdmpp import dataset as ds
from cdmpp.errors import InputError
from cdmpp.featurize.loops import with_loop_tokens
from cdmpp.featurize.parallel import default_workers
from cdmpp.featurize.trace import folder_traces, with_trace_tokens
from cdmpp.model import ModelConfig
from cdmpp.predictor import LatencyPredictor
from cdmpp.train.baselines import TreeBaseline
from cdmpp.train.config import TrainConfig
from cdmpp.train.devices import corpus_dirs, load_corpus, split_corpus, tree_inputs, tuned_phase
from cdmpp.train.fit import fit_transformer
from cdmpp.train.folds import parse_fold
from cdmpp.train.metrics import summary
from cdmpp.train.splits import Split, drop_sweep_workloads, drop_unstable_labels, sweep_own_programs, thin_training

STUDY_COLUMNS = ("programs", "mape", "median_ape", "kendall_tau", "best_ratio", "decile_log_ratio", "slow_half_log_ratio", "slope",
                 "best_speed", "untunable_tasks", "untunable_level", "untunable_within", "tunable_within")


RESIDUAL_INPUTS = ("trace", "psf")
"""Inputs of the input check's residual trees: the schedule trace's decisions, or the
summed ``PerStoreFeature`` rows (the control)."""


@dataclass
class StudyConfig:
    """What :func:`run_fit_study` trains and on which data.

    Attributes:
        datasets: dataset folders of device folders, or device folders' parents
            (:func:`cdmpp.train.devices.corpus_dirs`).
        levers: names in :data:`LEVERS`, in the order run.
        exclude: device ids left out.
        epochs, train_share, d_model, n_layers, ff_dim, dropout: the base recipe every
            lever starts from (the shipped checkpoint's by default, with fewer epochs).
        seed: seed of the split and of training.
        trees: also fit and score the tree baseline.
        residual_inputs: inputs of the residual trees of the input check (``"trace"``,
            ``"psf"``), none by default.
        fold: a leave-family-out fold (``"fold-2-of-4"``) held out of training and
            scored as the part ``"fold"`` (its tuned-phase programs: ``"fold-tuned"``);
            ``None``: none.
    """

    datasets: list[Path]
    levers: list[str] = field(default_factory=lambda: ["current"])
    exclude: tuple[str, ...] = ()
    epochs: int = 10
    train_share: float = 1.0
    d_model: int = 192
    n_layers: int = 3
    ff_dim: int = 512
    dropout: float = 0.05
    seed: int = 0
    trees: bool = True
    residual_inputs: tuple[str, ...] = ()
    fold: str | None = None

    def __post_init__(self):
        if self.fold is not None and parse_fold(self.fold) is None:
            raise InputError(f"fold {self.fold!r}: name a leave-family-out fold like fold-1-of-4 (`cdmpp networks --folds 4`)")
        bad = [r for r in self.residual_inputs if r not in RESIDUAL_INPUTS]
        if bad:
            raise InputError(f"unknown residual input(s) {', '.join(bad)}; known: {', '.join(RESIDUAL_INPUTS)}")
        unknown = [n for n in self.levers if n not in LEVERS]
        if unknown:
            raise InputError(f"unknown lever(s) {', '.join(unknown)}; known: {', '.join(LEVERS)}")
        if not self.levers:
            raise InputError("give at least one lever")
        if self.epochs < 1:
            raise InputError(f"epochs must be >= 1, got {self.epochs}")


def noise_ceiling(folders: Sequence[Path]) -> dict:
    """A second timing against the first, scored like a prediction.

    Reads each folder's ``remeasured.jsonl`` (or ``.gz``; written by ``cdmpp
    remeasure``): the label is the median of the stored repeats (``run_secs``), the
    "prediction" the median of the new ones (``again``).

    Returns:
        ``{"programs", "mape", "median_ape", "p90_ape", "folders"}`` (fractions); the
        error fields are NaN when no folder has remeasured programs.
    """
    first, second, used = [], [], []
    for folder in folders:
        path = ds.resolve(Path(folder) / "remeasured.jsonl")
        if path is None:
            continue
        n = 0
        for _, obj in ds.iter_json_lines(path, []):
            a, b = obj.get("run_secs") or [], obj.get("again") or []
            if a and b and not obj.get("error"):
                first.append(float(np.median(a)))
                second.append(float(np.median(b)))
                n += 1
        if n:
            used.append(f"{Path(folder).name} ({n})")
    if not first:
        nan = float("nan")
        return {"programs": 0, "mape": nan, "median_ape": nan, "p90_ape": nan, "folders": []}
    t, p = np.asarray(first), np.asarray(second)
    ape = np.abs(p - t) / t
    return {"programs": int(t.size), "mape": float(ape.mean()), "median_ape": float(np.median(ape)),
            "p90_ape": float(np.quantile(ape, 0.9)), "folders": used}


def feature_ambiguity(data, index: np.ndarray, decimals: int = 3) -> dict:
    """Programs that the leaf features cannot tell apart from another program of their task.

    Two programs are twins when they belong to the same task (a pooled corpus qualifies
    each workload by its device, so a task is one device's) and their
    leaf feature matrices and leaf positions are equal after rounding to ``decimals``.

    Args:
        data: :class:`~cdmpp.featurize.batch.FeaturizedPrograms`.
        index: int64 ``(K,)`` the programs looked at.

    Returns:
        ``programs``; ``twins``: the share of them with a twin; ``twin_ratio_median`` and
        ``twin_ratio_p90``: the slowest / fastest latency within a twin group;
        ``variance_share``: the share of the within-task variance of log-latency that
        lies inside twin groups; ``floor_mape``: the MAPE of predicting each twin
        group's median latency for its programs (a lower bound for any model of these
        features, on these programs).
    """
    index = np.asarray(index, dtype=np.int64)
    groups: dict[tuple, list[int]] = {}
    for i in index:
        a, b = data.ptr[i], data.ptr[i + 1]
        h = hashlib.blake2b(np.round(data.x[a:b].astype(np.float64), decimals).tobytes(), digest_size=16)
        h.update(np.asarray(data.pos[a:b], np.int64).tobytes())
        groups.setdefault((int(data.workload[i]), h.hexdigest()), []).append(int(i))
    lt = np.log(data.latency)
    multi = [np.asarray(g) for g in groups.values() if len(g) > 1]
    spread = np.array([lt[g].max() - lt[g].min() for g in multi]) if multi else np.zeros(0)
    inside = sum(float(((lt[g] - lt[g].mean()) ** 2).sum()) for g in multi)
    total = 0.0
    task = data.workload[index]
    for t in np.unique(task):
        s = lt[index[task == t]]
        total += float(((s - s.mean()) ** 2).sum())
    ape = []
    for g in groups.values():
        g = np.asarray(g)
        med = np.exp(np.median(lt[g]))
        ape.append(np.abs(med - data.latency[g]) / data.latency[g])
    ape = np.concatenate(ape) if ape else np.zeros(0)
    nan = float("nan")
    return {
        "programs": int(index.size),
        "twins": float(sum(len(g) for g in multi) / max(1, index.size)),
        "twin_ratio_median": float(np.exp(np.median(spread))) if spread.size else nan,
        "twin_ratio_p90": float(np.exp(np.quantile(spread, 0.9))) if spread.size else nan,
        "variance_share": inside / total if total > 0 else nan,
        "floor_mape": float(ape.mean()) if ape.size else nan,
    }


def _score(pred: np.ndarray, data, index: np.ndarray) -> dict:

    row = summary(pred, data.latency[index], data.workload[index])
    return {k: row[k] for k in STUDY_COLUMNS}


def residual_rows(pred: dict[str, np.ndarray], data, inputs: dict[str, np.ndarray], index: dict[str, np.ndarray],
                  seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """The input check: trees fitted to the log residual on the ``"fit"`` programs.

    Args:
        pred: predicted latency (s), float64 ``(len(index[part]),)`` per part (``"fit"``,
            ``"validation"``).
        data: the corpus's programs (``latency``, float64 ``(P,)`` seconds).
        inputs: per input name, float32 ``(P, D)`` rows of every program.
        index: program indices per part.

    Returns:
        ``{input name: {part: corrected predicted latency (s)}}``: ``pred`` times the
        exponential of the trees' predicted residual.
    """

    resid = np.log(data.latency[index["fit"]]) - np.log(pred["fit"])
    out = {}
    for name, x in inputs.items():
        trees = xgb.XGBRegressor(n_estimators=300, max_depth=6, learning_rate=0.05, subsample=0.8,
                                 tree_method="hist", random_state=seed, n_jobs=2)
        trees.fit(x[index["fit"]], resid)
        out[name] = {part: pred[part] * np.exp(trees.predict(x[idx]).astype(np.float64)) for part, idx in index.items()}
    return out


def _with_extra_data(split, base, tuned_train: np.ndarray, extra: str, seed: int):
    """``split`` with a lever's extra training programs (:attr:`Lever.extra_data`): the
    tuned-phase programs ``tuned_train``, or as many of ``base``'s training programs that
    ``split`` left out, drawn with ``seed``.

    Raises:
        InputError: fewer left-out programs than tuned ones (a ``train_share`` too large).
    """
    if not extra:
        return split
    if extra == "tuned":
        add = tuned_train
    else:
        rest = np.setdiff1d(base.train, split.train)
        if len(rest) < len(tuned_train):
            raise InputError(f"the random control needs {len(tuned_train)} more training programs, but the train "
                             f"share leaves out only {len(rest)}; lower --train-share")
        add = np.random.default_rng(seed).choice(rest, size=len(tuned_train), replace=False)
    return Split(np.sort(np.concatenate([split.train, add])), split.val, split.test, split.holdout)


def lever_configs(cfg: StudyConfig, lever: Lever, num_devices: int) -> tuple[ModelConfig, TrainConfig]:
    """The model and training configs of ``lever`` on the study's base recipe, for a device
    table of ``num_devices`` rows (``feature_dim`` is set later, from the data)."""

    # the levers add the trace token, the loop tokens and the LSE head themselves (``Lever``);
    # "current" is the mean-pooled MSE recipe on the leaves
    model = ModelConfig(d_model=cfg.d_model, n_layers=cfg.n_layers, ff_dim=cfg.ff_dim, dropout=cfg.dropout,
                        num_devices=num_devices, trace_tokens=False, loop_tokens=False, pooling="mean")
    model = dataclasses.replace(model, **lever.model)
    train = dict(lever.train)
    if train.get("epochs", 0) < 0:
        train["epochs"] = cfg.epochs * -train["epochs"]
    tc = TrainConfig(**{"epochs": cfg.epochs, "seed": cfg.seed, "train_share": cfg.train_share, "huber_delta": 0.0,
                        "trace_dropout": 0.0, **train})
    return model, tc


def run_fit_study(
    cfg: StudyConfig, progress: bool = False, cache_dir: Path | None = None, log=print,
    earlier: dict | None = None, on_lever: Callable[[dict], None] | None = None,
) -> dict:
    """Train every lever of ``cfg`` on one split and score fit and validation.

    Args:
        earlier: the result of an earlier run of this study (same datasets, split, base
            recipe and trees); its rows are kept, and its levers (and trees) are not
            trained again. ``None``: start afresh.
        on_lever: called with the result so far after the trees and after each lever,
            so that a caller can save every finished row of a long study.

    Returns:
        ``{"config", "split", "noise", "ambiguity", "rows"}``; each row has ``lever``,
        ``model``, ``part`` (``"fit"`` or ``"validation"``), the fields of
        :data:`STUDY_COLUMNS` and ``train_s`` (wall seconds of that model's training).

    Raises:
        InputError, DatasetError: bad data, an unknown lever, or an empty split.
    """

    loops = any(LEVERS[n].model.get("loop_tokens") for n in cfg.levers)
    # the cold protocol's labels (warm timings are a protocol row of their own; the study reads traces folder by folder)
    corpus = load_corpus(cfg.datasets, cache_dir, tuple(cfg.exclude), progress, loops=loops, workers=default_workers(),
                         protocols=False)
    base = split_corpus(corpus, cfg.fold, seed=cfg.seed)
    # tuned-phase programs train only the levers that ask for them; on validation workloads they are a part of their own
    tuned = tuned_phase(corpus)
    tuned_train = base.train[tuned[base.train]]
    base = Split(base.train[~tuned[base.train]], base.val, base.test, base.holdout)
    val_parts = {"validation": base.val[~tuned[base.val]]}
    if tuned[base.val].any():
        val_parts["validation-tuned"] = base.val[tuned[base.val]]
    if cfg.fold is not None:  # the held-out families: what a recipe is chosen on
        val_parts["fold"] = base.test[~tuned[base.test]]
        if tuned[base.test].any():
            val_parts["fold-tuned"] = base.test[tuned[base.test]]
    for name in cfg.levers:
        if LEVERS[name].extra_data and not len(tuned_train):
            raise InputError(f"lever {name} needs tuned-phase programs of training workloads; collect some with "
                             f"`cdmpp collect --tuned-tasks N`")
    data, descriptors = corpus.data, corpus.descriptors()
    folders = [d for d in corpus_dirs(cfg.datasets) if d.name not in cfg.exclude]
    split_counts = {"train": int(len(base.train)), "validation": int(len(val_parts["validation"]))}
    if cfg.fold is not None:
        split_counts["fold"] = int(len(base.test))
    if tuned.any():
        split_counts.update(tuned_train=int(len(tuned_train)),
                            tuned_validation=int(len(val_parts.get("validation-tuned", ()))))
    result = {
        "config": {**dataclasses.asdict(cfg), "datasets": [str(d) for d in cfg.datasets],
                   "devices": [d.row_name for d in corpus.devices]},
        "split": split_counts,
        "noise": noise_ceiling(folders),
        "ambiguity": {"train": feature_ambiguity(data, base.train),
                      "validation": feature_ambiguity(data, val_parts["validation"])},
        "lever_descriptions": {n: LEVERS[n].description for n in cfg.levers},
        "rows": [],
    }
    done = set()
    if earlier is not None:
        if not same_study(earlier, result):
            raise InputError("the earlier study was run on other data, another split or another base recipe; "
                             "give a new output file")
        result["rows"] = [r for r in earlier["rows"] if r["lever"] != "-" or cfg.trees]
        result["lever_descriptions"] = {**earlier.get("lever_descriptions", {}), **result["lever_descriptions"]}
        done = {r["lever"] for r in result["rows"]}
        kept = [n for n in earlier["config"]["levers"] if n in done]
        result["config"]["levers"] = kept + [n for n in cfg.levers if n not in kept]
        log(f"resuming: {', '.join(sorted(done))} already scored")
    log(f"split: {split_counts}; noise {result['noise']}")
    fit_index = thin_training(base, data.workload, cfg.train_share, cfg.seed).train
    residual_inputs = {}
    traces = None
    if "trace" in cfg.residual_inputs or any(LEVERS[n].trace_token for n in cfg.levers):
        traces = folder_traces([corpus.folders[d.row_name] for d in corpus.devices], data.latency)  # row order
    if "trace" in cfg.residual_inputs:
        residual_inputs["trace"] = traces
    steps = None
    if any(LEVERS[n].trace_sequence for n in cfg.levers):
        steps = folder_trace_steps([corpus.folders[d.row_name] for d in corpus.devices], data.latency)
    if "psf" in cfg.residual_inputs:
        residual_inputs["psf"] = tree_inputs(data, descriptors, np.arange(len(data)))
    if cfg.trees and "-" not in done:
        t0 = time.time()
        tree = TreeBaseline(seed=cfg.seed).fit(tree_inputs(data, descriptors, fit_index), data.latency[fit_index])
        secs = round(time.time() - t0, 1)
        for part, index in (("fit", fit_index), *val_parts.items()):
            pred = tree.predict(tree_inputs(data, descriptors, index))
            result["rows"].append({"lever": "-", "model": "xgboost PerStoreFeature", "part": part,
                                   **_score(pred, data, index), "train_s": secs})
            log(result["rows"][-1])
        if on_lever is not None:
            on_lever(result)
    sweep = sweep_own_programs(corpus.networks(), corpus.raw_keys)  # the same mask for every lever
    for name in cfg.levers:
        if name in done:
            continue
        lever = LEVERS[name]
        mcfg, tcfg = lever_configs(cfg, lever, len(corpus.devices))
        split = thin_training(base, data.workload, tcfg.train_share, tcfg.seed)
        split = _with_extra_data(split, base, tuned_train, lever.extra_data, tcfg.seed)
        split = drop_unstable_labels(split, corpus.repeat_cv, tcfg.max_repeat_cv)
        split = drop_sweep_workloads(split, corpus.networks(), corpus.raw_keys, data.workload, tcfg.sweep_workloads)
        lever_data = data
        if mcfg.loop_tokens:
            lever_data = with_loop_tokens(lever_data)
        if lever.trace_token:
            lever_data = with_trace_tokens(lever_data, traces)
        if lever.trace_sequence:
            lever_data = with_trace_sequence(lever_data, steps)
        if lever_data is not data:
            mcfg = dataclasses.replace(mcfg, feature_dim=lever_data.x.shape[1])
        t0 = time.time()
        model = fit_transformer(lever_data, split, mcfg, tcfg, None, use_wandb=False, progress=progress,
                                device_descriptors=descriptors, device_caches=corpus.caches(),
                                sweep_programs=sweep)
        secs = round(time.time() - t0, 1)
        index = {"fit": split.train, **val_parts}
        predictor = LatencyPredictor(model, {})
        pred = {part: predictor.predict_featurized(lever_data, idx) for part, idx in index.items()}
        for part, idx in index.items():
            result["rows"].append({"lever": name, "model": "cdmpp transformer", "part": part,
                                   **_score(pred[part], data, idx), "train_s": secs,
                                   "train_programs": int(len(split.train))})
            log(result["rows"][-1])
        for inp, corrected in residual_rows(pred, data, residual_inputs, index, cfg.seed).items():
            for part, idx in index.items():
                result["rows"].append({"lever": name, "model": f"cdmpp transformer + residual trees on {inp}",
                                       "part": part, **_score(corrected[part], data, idx), "train_s": secs,
                                       "train_programs": int(len(split.train))})
                log(result["rows"][-1])
        if on_lever is not None:
            on_lever(result)
    return result


def same_study(a: dict, b: dict) -> bool:
    """Whether two fit-study results share their data, split and base recipe (their levers
    may differ): the rows of one can stand beside the other's."""
    def key(r):  # the devices name the data: the same folders may be given by another path
        c = {k: v for k, v in r["config"].items() if k not in ("levers", "trees", "residual_inputs", "datasets")}
        # tuned-phase programs train only the levers that ask for them, so a folder that gained
        # some still has the same split for the others
        split = {k: r["split"][k] for k in ("train", "validation")}
        return json.loads(json.dumps([c, split]))  # tuples and lists alike
    return key(a) == key(b)


def format_study(result: dict) -> str:
    """The study as markdown: the noise ceiling, feature ambiguity, and one table row per
    (lever, model, part)."""
    n, lines = result["noise"], []
    lines.append(
        f"Noise ceiling (a second timing against the first, {n['programs']} programs): MAPE {100 * n['mape']:.1f}%, "
        f"median APE {100 * n['median_ape']:.1f}%, p90 APE {100 * n['p90_ape']:.1f}%"
    )
    for part, a in result["ambiguity"].items():
        lines.append(
            f"Feature twins ({part}, {a['programs']} programs): {100 * a['twins']:.1f}% share their leaf features with "
            f"another program of their task; slowest / fastest within such a group: median {a['twin_ratio_median']:.2f}, "
            f"p90 {a['twin_ratio_p90']:.2f}; {100 * a['variance_share']:.1f}% of the within-task variance; floor MAPE "
            f"{100 * a['floor_mape']:.1f}%"
        )
    lines += ["", "| lever | model | part | programs | MAPE | median APE | tau | best p/m | fastest 10% log p/m | "
              "slowest 50% log p/m | slope | best spd | 1-prog tasks | 1-prog lvl | 1-prog <=1.25x | "
              "other tasks <=1.25x | train s |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
              "---: | ---: |"]
    nan = float("nan")
    for r in result["rows"]:
        lines.append(
            f"| {r['lever']} | {r['model']} | {r['part']} | {r['programs']} | {100 * r['mape']:.1f}% | "
            f"{100 * r['median_ape']:.1f}% | {r['kendall_tau']:.3f} | {r['best_ratio']:.2f} | "
            f"{r['decile_log_ratio']:+.2f} | {r.get('slow_half_log_ratio', nan):+.2f} | {r['slope']:.2f} | "
            f"{r['best_speed']:.3f} | {r.get('untunable_tasks', '-')} | {r.get('untunable_level', nan):+.2f} | "
            f"{100 * r.get('untunable_within', nan):.1f}% | {100 * r.get('tunable_within', nan):.1f}% | "
            f"{r['train_s']:.0f} |"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench fit-study``'s arguments on an ``argparse`` parser."""
    parser.add_argument("-d", "--dataset", nargs="+", required=True, help="dataset folder(s) of device folders")
    parser.add_argument("--levers", nargs="+", default=["current"], choices=list(LEVERS),
                        help="recipe changes to train, each from the same base recipe")
    parser.add_argument("--exclude-device", nargs="+", default=(), metavar="DEVICE_ID")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--train-share", type=float, default=1.0,
                        help="train on this share of each training task's programs (all levers, and the trees)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-trees", action="store_true", help="skip the tree baseline")
    parser.add_argument("--residual-inputs", nargs="+", default=(), choices=RESIDUAL_INPUTS,
                        help="input check: trees on the transformer's residual from the schedule trace's decisions "
                        "(trace) or from PerStoreFeature (psf, the control)")
    parser.add_argument("--cache", default=".cdmpp-cache", help="featurization cache folder")
    parser.add_argument("-o", "--out", required=True,
                        help="JSON file to write after every lever (the markdown table goes beside it); when it "
                        "exists, the study resumes: its levers are kept and not trained again")
    parser.add_argument("--fresh", action="store_true", help="start afresh even when --out exists")
    parser.add_argument("--fold", default=None,
                        help="also hold out a leave-family-out fold (fold-I-of-K, `cdmpp networks --folds K`) and score it as a part "
                             "of its own: the part recipes are chosen on")


def main(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments; writes ``--out`` and ``--out`` with ``.md``."""

    cfg = StudyConfig([Path(d) for d in args.dataset], list(args.levers), tuple(args.exclude_device or ()),
                      epochs=args.epochs, train_share=args.train_share, seed=args.seed, trees=not args.no_trees,
                      residual_inputs=tuple(args.residual_inputs), fold=args.fold)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def log(row):
        print(row, flush=True)

    def save(result):
        write_result(out, result, format_study(result))

    earlier = None
    if out.exists() and not args.fresh:
        earlier = json.loads(out.read_text(encoding="utf-8"))
    result = run_fit_study(cfg, progress=False, cache_dir=Path(args.cache), log=log, earlier=earlier, on_lever=save)
    save(result)
    print(format_study(result))
    return 0
