"""Benchmark: the cost of one cost-model call inside a tuning loop.

MetaSchedule's evolutionary search asks its cost model about 512 candidates at a time,
about 5 times per search iteration (``shared/notes/tvm-0.27.md``).  This benchmark times
such a call of :class:`cdmpp.LatencyPredictor` on programs of a dataset, stage by stage:

* ``PerStoreFeature (TVM, not used by cdmpp)``: TVM's 164 per-store features, what TVM's
  XGBoost model pays for its features (shown for reference);
* ``structural hash (the plugin's cache key)``: ``structural_hash`` of each candidate;
* ``compact AST``: the loop-nest walk that builds the leaves and their features
  (:func:`cdmpp.featurize.build_tree`, its compiled walk); the row after it the same
  with the Python walk, the reference the compiled one must equal;
* ``schedule trace vectors``: each candidate's trace decisions, for a checkpoint that
  reads them (:func:`cdmpp.featurize.trace.trace_decisions`);
* ``transformer``: collating the leaves and the model's forward pass; the row after it
  the same in bfloat16 (``precision="bf16"``: fast where the CPU has AVX512-BF16 or AMX,
  slow elsewhere);
* ``online trees``: the plugin's residual XGBoost on the same candidates' cached entries,
  fitted first on the measured programs XGBModel is fitted on (what each call adds once
  the plugin has learned from trials);
* ``predict (end to end)``: :meth:`LatencyPredictor.predict` on the Schedules, all of
  the above but the hash;
* ``XGBModel.predict (TVM)``: TVM's own cost model on the same candidates, fitted first on
  other measured programs of the folder (it pays for ``PerStoreFeature`` too);
* ``CdmppCostModel.predict, new candidates``: the MetaSchedule plugin on candidates it has
  not seen (structural hash, featurization, transformer, scores); each timing starts from
  a newly loaded plugin that has already answered one call on other programs (as in a
  tuning loop, where it is loaded once), so its first call's set-up is not inside; and
  the same with ``precision="bf16"``;
* ``CdmppCostModel.predict, seen candidates``: the same call again, as when the search
  re-scores schedules it has scored before (the plugin's feature cache).

Run it with ``cdmpp bench speed -d datasets/slice``; it prints milliseconds per call and
microseconds per candidate (best of ``--repeats``), every row measured in one run.  Rebuilding the programs from
their tuning records is not timed: in a tuning loop the candidates arrive built.

With ``--network NET`` the candidates are instead new schedules of one task of ``NET``
(its largest by weight x FLOPs, or ``--task``): a zoo network or one outside the zoo
(:mod:`benchmarks.held_out`), its tasks extracted for this CPU and the schedules sampled
at random from the task's design space (:func:`cdmpp.collect.sample_schedules`, not
timed and not measured), as the tuner's candidates of a large task arrive.  XGBModel is
still fitted on measured programs of ``-d``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks import render_table, write_result
from benchmarks.held_out import network_tasks
from benchmarks.tune import pick_tasks
from cdmpp import dataset as ds
from cdmpp.collect.sampling import sample_schedules
from cdmpp.device import local_cpu
from cdmpp.featurize import as_module, build_tree
from cdmpp.predictor import LatencyPredictor
from cdmpp.train.report import checkpoint_line
from cdmpp.tuning.cost_model import CdmppCostModel
from cdmpp.tvm_compat import (
    ArgInfo,
    Schedule,
    Target,
    feature_context,
    ms,
    per_store_features,
    structural_hash,
)


def _best_of(fn, repeats: int, setup=None) -> float:
    """Fastest of ``repeats`` timings of ``fn()`` (or ``fn(setup())``, with ``setup`` untimed), in seconds."""
    best = float("inf")
    for _ in range(repeats):
        arg = setup() if setup is not None else None
        t0 = time.perf_counter()
        fn() if setup is None else fn(arg)
        best = min(best, time.perf_counter() - t0)
    return best


def _warmed(model: CdmppCostModel, ctx, candidates: list) -> CdmppCostModel:
    """``model`` after one predict call on ``candidates`` (its first call's set-up done)."""
    model.predict(ctx, candidates)
    return model


def task_candidates(network: str, task: str | None, target, count: int, seed: int = 0) -> tuple[str, list]:
    """New schedules of one task of ``network``, as a tuner's candidates arrive.

    Args:
        network: a zoo network (:func:`cdmpp.networks.network_names`) or one outside the zoo
            (:func:`benchmarks.held_out.held_out_networks`).
        task: a task name or its prefix before an ``_``; ``None`` takes the network's largest
            task by weight x FLOPs.
        target: TVM ``Target`` the tasks are extracted and sampled for.
        count: schedules wanted (fewer when the design space has fewer distinct ones).
        seed: seed of the sampling.

    Returns:
        ``(task name, schedules)``: MetaSchedule ``Schedule`` objects of the task's design
        space (:func:`cdmpp.collect.sample_schedules`), not measured.

    Raises:
        UnknownNetworkError: no such network.
        InputError: ``task`` matches none of its tasks.
    """

    ranked = network_tasks(network, target)
    chosen = pick_tasks(ranked, network, 1 if task is None else 0, () if task is None else (task,))[0]
    return chosen.name, sample_schedules(chosen.mod, target, count, seed)


def predict_call_seconds(
    dataset_dir: Path, checkpoint: str | None = None, candidates: int = 512, repeats: int = 3, seed: int = 0,
    network: str | None = None, task: str | None = None,
) -> tuple[int, dict[str, float]]:
    """Seconds one predict call on ``candidates`` programs takes, per stage (best of ``repeats``).

    Args:
        dataset_dir: a dataset folder (its first device folder is used) or a device folder.
        checkpoint: checkpoint folder; ``None`` uses the shipped one.
        candidates: programs per call, drawn at random from the folder's programs.
        repeats: timings per stage; the fastest is kept.
        seed: seed of the draw.
        network: draw the candidates instead as new schedules of one task of this network
            (:func:`task_candidates`); XGBModel is still fitted on the folder's programs.
        task: that task (a name or its prefix); ``None``: the network's largest.

    Returns:
        ``(programs per call, {stage: seconds per call})`` with the stages of the module
        docstring, in seconds per call; fewer programs than
        ``candidates`` when the folder (or the task's design space) has fewer.

    Raises:
        DatasetError: no device folder or no measured program there.
        UnknownNetworkError, InputError: no such network or task.
    """


    # with --network only XGBModel's 256 training programs come from the folder
    db = ds.load_device_dir(ds.device_dirs(Path(dataset_dir))[0], max_records=None if network is None else 256)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    order = np.random.default_rng(seed).permutation(len(db.programs))
    target = Target(db.manifest["device"]["target"])
    if network is None:
        pick, fit = order[:candidates], order[candidates : candidates + 256]
        schs = [Schedule(as_module(db.programs[i].record)) for i in pick]
    else:
        pick, fit = order[:0], order[:256]
        _, schs = task_candidates(network, task, target, candidates, seed)
    mods = [s.mod for s in schs]
    predictor = LatencyPredictor.load(checkpoint)
    bf16 = LatencyPredictor.load(checkpoint, precision="bf16")
    trees = [build_tree(m) for m in mods]
    n = len(trees)
    ctx = feature_context(target)
    cands = [ms.MeasureCandidate(s, ArgInfo.from_entry_func(s.mod)) for s in schs]
    xgb = ms.cost_model.XGBModel(num_warmup_samples=0, verbose_eval=1 << 30, num_tuning_cores=os.cpu_count() or 1)
    fit = fit if len(fit) else pick
    fit_mods = [as_module(db.programs[i].record) for i in fit]
    xgb.update(
        ctx,
        [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m)) for m in fit_mods],
        [ms.runner.RunnerResult([float(x) for x in db.programs[i].run_secs], None) for i in fit],
    )
    # a trace-token checkpoint reads the candidates' traces, as the plugin does
    traces = predictor.trace_vectors(schs)
    plugin = CdmppCostModel(checkpoint)
    plugin.predict(ctx, cands)  # fills its cache for the "seen" row
    # a plugin that has learned from measured trials: its residual trees score every candidate
    learned = CdmppCostModel(checkpoint)
    learned.update(ctx, [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m)) for m in fit_mods],
                   [ms.runner.RunnerResult([float(x) for x in db.programs[i].run_secs], None) for i in fit])
    learned.predict(ctx, cands)
    entries = [e for e in learned._entries([c.sch for c in cands], ctx.target) if e is not None]  # noqa: SLF001
    # other programs than the candidates, for the plugin's first (untimed) call
    warm = [ms.MeasureCandidate(Schedule(m), ArgInfo.from_entry_func(m)) for m in fit_mods[:16]]

    return n, {
        "PerStoreFeature (TVM, not used by cdmpp)": _best_of(lambda: per_store_features(target, mods), repeats),
        "structural hash (the plugin's cache key)": _best_of(lambda: [structural_hash(m) for m in mods], repeats),
        "compact AST": _best_of(lambda: [build_tree(m) for m in mods], repeats),
        "compact AST, Python walk (reference)": _best_of(lambda: [build_tree(m, compiled=False) for m in mods], repeats),
        "schedule trace vectors": _best_of(lambda: predictor.trace_vectors(schs), repeats),
        "transformer": _best_of(lambda: predictor.predict_trees(trees, traces=traces), repeats),
        "transformer, bf16 (precision='bf16')": _best_of(lambda: bf16.predict_trees(trees, traces=traces), repeats),
        "online trees (residual XGBoost, fitted)": _best_of(lambda: learned._log_latency(entries), repeats),  # noqa: SLF001
        "predict (end to end)": _best_of(lambda: predictor.predict(schs, target), repeats),
        "XGBModel.predict (TVM)": _best_of(lambda: xgb.predict(ctx, cands), repeats),
        "CdmppCostModel.predict, new candidates": _best_of(
            lambda model: model.predict(ctx, cands), repeats, setup=lambda: _warmed(CdmppCostModel(checkpoint), ctx, warm)
        ),
        "CdmppCostModel.predict, new candidates, bf16": _best_of(
            lambda model: model.predict(ctx, cands), repeats,
            setup=lambda: _warmed(CdmppCostModel(checkpoint, precision="bf16"), ctx, warm)
        ),
        "CdmppCostModel.predict, seen candidates": _best_of(lambda: plugin.predict(ctx, cands), repeats),
    }


def estimate_seconds(network: str, device: str | None, checkpoint: str | None, samples: int = 32) -> dict[str, float]:
    """Wall seconds of ``cdmpp estimate NETWORK`` (no database), stage by stage, in this process,
    then the whole command once more as a fresh process (its imports included).

    Stages: ``imports`` (the command's modules, measured in a fresh interpreter), ``load
    checkpoint``, ``torch -> Relax import`` (:func:`cdmpp.network_input.load_relax`),
    ``task extraction``, ``sampling schedules``, ``featurize and predict`` (the prediction
    core on every task's samples and the chosen schedule's interval and warm row), and
    ``cdmpp estimate, end to end`` (the command in a new process).
    """
    import subprocess  # noqa: PLC0415  (only this bench)

    import cdmpp.estimate as estimate_mod  # noqa: PLC0415  (timed here, after the imports stage)
    from cdmpp.network_input import load_relax  # noqa: PLC0415  (timed here, after the imports stage)
    from cdmpp.tasks import relax_tasks  # noqa: PLC0415  (timed here, after the imports stage)

    out: dict[str, float] = {}
    code = "import time; t = time.perf_counter(); import cdmpp.cli, cdmpp.inference_cli; print(time.perf_counter() - t)"
    out["imports"] = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                          check=True).stdout.strip())
    t0 = time.perf_counter()
    predictor = LatencyPredictor.load(checkpoint)
    out["load checkpoint"] = time.perf_counter() - t0
    descriptor = predictor.device_of(device)
    target = Target(descriptor.target) if descriptor is not None else Target("llvm")
    t0 = time.perf_counter()
    net = load_relax(network, target)
    out["torch -> Relax import"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    tasks = relax_tasks(net.mod, target)
    out["task extraction"] = time.perf_counter() - t0
    sampling = [0.0]
    real = estimate_mod.sample_schedules

    def timed_sampling(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            sampling[0] += time.perf_counter() - t

    estimate_mod.sample_schedules = timed_sampling
    try:
        t0 = time.perf_counter()
        estimate_mod.estimate_network(predictor, tasks, device, target, cfg=estimate_mod.EstimateConfig(samples=samples))
        whole = time.perf_counter() - t0
    finally:
        estimate_mod.sample_schedules = real
    out["sampling schedules"] = sampling[0]
    out["featurize and predict"] = whole - sampling[0]
    cmd = [sys.executable, "-m", "cdmpp.cli", "estimate", network, "--samples", str(samples)]
    cmd += ["--device", device] if device else []
    cmd += ["-c", checkpoint] if checkpoint else []
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, text=True, check=True)
    out["cdmpp estimate, end to end"] = time.perf_counter() - t0
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``cdmpp bench speed``."""
    p.add_argument("-d", "--dataset", default="datasets/slice", help="dataset or device folder of the candidates")
    p.add_argument("-c", "--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    p.add_argument("--candidates", type=int, default=512, help="programs per predict call")
    p.add_argument("--repeats", type=int, default=3, help="timings per stage; the fastest is kept")
    p.add_argument("--network", default=None,
                   help="candidates: new schedules of a task of this network (zoo or outside it, e.g. convnext_tiny-b1)")
    p.add_argument("--task", default=None, help="with --network: the task (name or prefix; default: its largest)")
    p.add_argument("--estimate", default=None, metavar="NETWORK",
                   help="also time `cdmpp estimate NETWORK` stage by stage (a zoo name or module.py:function)")
    p.add_argument("--device", default=None, help="with --estimate: the device id to estimate for")
    p.add_argument("--output", default=None, help="also write the timings (seconds per call) as JSON here")


def main(args: argparse.Namespace) -> int:
    """Print the stage timings of one predict call (see the module docstring)."""
    if args.task and not args.network:
        print("error: --task needs --network", file=sys.stderr)
        return 2
    n, secs = predict_call_seconds(Path(args.dataset), args.checkpoint, args.candidates, args.repeats,
                                   network=args.network, task=args.task)
    where = f"new schedules of {args.network}'s {args.task or 'largest task'}" if args.network else "programs"
    print(f"one predict call on {n} candidates: {where} ({os.cpu_count()} cores, best of {args.repeats})")
    print(f"{'stage':<42}{'ms / call':>12}{'us / candidate':>16}")
    for name, s in secs.items():
        print(f"{name:<42}{s * 1e3:>12.1f}{s * 1e6 / n:>16.1f}")
    xgb, new = secs["XGBModel.predict (TVM)"], secs["CdmppCostModel.predict, new candidates"]
    print(f"plugin / XGBModel: {new / xgb:.2f}x on new candidates, "
          f"{secs['CdmppCostModel.predict, seen candidates'] / xgb:.2f}x on seen ones")
    estimate = estimate_seconds(args.estimate, args.device, args.checkpoint) if args.estimate else None
    if estimate:
        print(f"\ncdmpp estimate {args.estimate} (no database), by stage:")
        for name, sec in estimate.items():
            print(f"{name:<42}{sec:>12.2f} s")
    if args.output:
        cpu = local_cpu()
        line = checkpoint_line(Path(args.checkpoint) if args.checkpoint else None)
        record = {"candidates": n, "where": where, "repeats": args.repeats, "cpu": cpu.model,
                  "device_id": cpu.device_id, "cores": os.cpu_count(), "checkpoint": line,
                  "seconds_per_call": secs, **({"estimate": args.estimate, "estimate_seconds": estimate} if estimate else {})}
        body = [[name, f"{s * 1e3:.1f}", f"{s * 1e6 / n:.1f}"] for name, s in secs.items()]
        table = (f"{line}\n\nOne predict call on {n} candidates ({where}; {cpu.model}, `{cpu.device_id}`, "
                 f"{os.cpu_count()} cores, best of {args.repeats}):\n\n"
                 + render_table(["stage", "ms / call", "us / candidate"], body, markdown=True, left=1)
                 + f"\n\nplugin / XGBModel: {new / xgb:.2f}x on new candidates")
        if estimate:
            table += (f"\n\n`cdmpp estimate {args.estimate}` (no database), by stage:\n\n"
                      + render_table(["stage", "s"], [[k, f"{v:.2f}"] for k, v in estimate.items()], markdown=True, left=1))
        write_result(Path(args.output), record, table)
    return 0
