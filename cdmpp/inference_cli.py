"""The user's inference commands: ``cdmpp predict`` and ``cdmpp estimate``.

They are the command-line twins of :meth:`cdmpp.LatencyPredictor.predict_interval` and of
the server's ``/estimate`` (:func:`cdmpp.estimate.estimate_network`).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import dataset as ds
from .cli_flags import Flag, add_flags, given_fields
from .device import INFERENCE_PRECISIONS, PROTOCOLS
from .errors import InputError
from .estimate import (
    EstimateConfig,
    estimate_network,
    format_estimate,
    work_dir_best,
)
from .network_input import load_network
from .predictor import LatencyPredictor
from .records import iter_json_lines, parse_record, read_workload_lines
from .train.metrics import summary
from .tuning.config import OBJECTIVES, OnlineConfig, SearchConfig, TuneConfig

CSV_FIELDS = ("record", "workload_key", "predicted_s", "low_s", "high_s", "measured_s", "error")


@dataclass
class PredictedProgram:
    """One program's prediction.

    Attributes:
        record: 1-based line of its tuning record (0 for a TVM-JSON program).
        workload_key: the workload's structural hash ("" for a TVM-JSON program).
        predicted_s, low_s, high_s: predicted latency and its 10-90% interval, seconds
            (NaN when the program cannot be featurized).
        measured_s: median of its measured repeats, seconds; ``None`` when not measured.
        problem: why it has no prediction ("" when it has one).
    """

    record: int
    workload_key: str
    predicted_s: float
    low_s: float
    high_s: float
    measured_s: float | None = None
    problem: str = ""

    @property
    def error(self) -> float | None:
        """predicted / measured - 1, or ``None`` without a measurement or a prediction."""
        if self.measured_s is None or not np.isfinite(self.predicted_s):
            return None
        return self.predicted_s / self.measured_s - 1.0


def _records(work: Path) -> tuple[list, list[str], list[int], list[float | None]]:
    """Tuning records of a JSONDatabase folder: ``(records, workload keys, line numbers,
    measured seconds or None)``; measured records and candidates alike.

    Raises:
        InputError: a missing file, or a malformed line (named).
    """
    from .tvm_compat import Workload  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    wl_path, rec_path = ds.database_files(work)
    bad: list = []
    workloads, keys = [], []
    for lineno, key, obj in read_workload_lines(wl_path, bad):
        try:
            workloads.append(Workload.from_json(obj))
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            raise InputError(f"{wl_path}:{lineno}: not a MetaSchedule workload: {str(err).strip()[:200]}") from err
        keys.append(key)
    records, rkeys, lines, measured = [], [], [], []
    for lineno, obj in iter_json_lines(rec_path, bad):
        widx, rec, secs = parse_record(obj, workloads, f"{rec_path}:{lineno}")
        records.append(rec)
        rkeys.append(keys[widx])
        lines.append(lineno)
        measured.append(secs)
    if bad:
        raise InputError(f"{bad[0].path}:{bad[0].lineno}: {bad[0].error} ({len(bad)} bad line(s))")
    if not records:
        raise InputError(f"{rec_path}: no tuning record")
    return records, rkeys, lines, measured


def predict_programs(predictor, source: Path, device: str | None = None,
                     protocol: str = "cold") -> tuple[list[PredictedProgram], str | None]:
    """Predict every program of a JSONDatabase folder, or the one program of a TVM-JSON file.

    Args:
        predictor: a :class:`cdmpp.LatencyPredictor`.
        source: a folder with ``database_workload.json`` and ``database_tuning_record.json``
            (plain or gzipped), or a file of ``tvm.ir.save_json`` of a scheduled PrimFunc
            or one-PrimFunc IRModule.
        device: a device id the checkpoint knows; default the device that the records'
            target (or this machine) picks (:meth:`cdmpp.LatencyPredictor.resolve_device`).
        protocol: the timing protocol predicted, ``"cold"`` or ``"warm"`` (where the
            checkpoint learned the device's: :meth:`cdmpp.LatencyPredictor.protocols`).

    Returns:
        ``(programs in file order, device id)``, predicted by
        :meth:`cdmpp.LatencyPredictor.predict_each` (each record's schedule trace
        included).  A record that cannot be featurized gets NaN predictions and its
        ``problem``, and is named in the log; the others are unaffected.

    Raises:
        InputError: a missing or malformed file.  UnknownDeviceError: an unknown device, or
            a protocol the checkpoint did not learn for it.
    """
    source = Path(source)
    if source.is_dir():
        records, keys, lines, measured = _records(source)
        target = records[0].target if device is None else None
    elif source.is_file():
        from .tvm_compat import load_json  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

        try:
            records = [load_json(source.read_text(encoding="utf-8"))]
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            raise InputError(f"{source}: not a JSONDatabase folder nor TVM JSON of a program: {str(err)[:200]}") from err
        keys, lines, measured, target = [""], [0], [None], None
    else:
        raise InputError(f"{source}: no such file or folder")
    names = [f"record {line}" if line else str(source) for line in lines]
    pred = predictor.predict_each(records, target if device is None else None, device, names, protocol=protocol)
    out = [PredictedProgram(lines[i], keys[i], float(pred.latency_s[i]), float(pred.low_s[i]), float(pred.high_s[i]),
                            measured[i], pred.problems[i])
           for i in range(len(records))]
    return out, pred.device


def write_csv(programs: list[PredictedProgram], stream) -> None:
    """Write the programs as CSV (:data:`CSV_FIELDS`; empty cells where not measured)."""
    w = csv.writer(stream)
    w.writerow(CSV_FIELDS)
    for p in programs:
        err = p.error
        w.writerow([p.record, p.workload_key, f"{p.predicted_s:.6g}", f"{p.low_s:.6g}", f"{p.high_s:.6g}",
                    "" if p.measured_s is None else f"{p.measured_s:.6g}", "" if err is None else f"{err:.4f}"])


def accuracy_line(programs: list[PredictedProgram]) -> str | None:
    """MAPE, median APE, Kendall tau and the tuned-regime columns (tau over each task's
    fastest half, top-1 overall and among the 8 fastest, the fastest program's predicted /
    measured, the slope) over the measured programs, or ``None``."""

    m = [p for p in programs if p.measured_s is not None and np.isfinite(p.predicted_s)]
    if not m:
        return None
    keys = {k: i for i, k in enumerate(sorted({p.workload_key for p in m}))}
    r = summary(np.array([p.predicted_s for p in m]), np.array([p.measured_s for p in m]),
                np.array([keys[p.workload_key] for p in m]))
    return (f"{len(m)} measured programs: MAPE {100 * r['mape']:.1f}%, median APE {100 * r['median_ape']:.1f}%, "
            f"tau {r['kendall_tau']:.3f} (fastest half {r['tau_fast_half']:.3f}), top-1 {r['best_speed']:.3f} "
            f"(among the 8 fastest {r['top1_of_8']:.3f}), fastest program per task predicted/measured "
            f"{r['best_ratio']:.2f} (median), within-task slope {r['slope']:.2f}")


def _run_predict(args) -> int:

    predictor = LatencyPredictor.load(args.checkpoint)
    programs, device_id = predict_programs(predictor, Path(args.work_dir), args.device, args.protocol)
    if args.output:
        with open(args.output, "w", newline="", encoding="utf-8") as f:
            write_csv(programs, f)
        print(f"{len(programs)} programs predicted for device {device_id}: {args.output}")
    else:
        write_csv(programs, sys.stdout)
    bad = [p for p in programs if p.problem]
    for p in bad[:5]:
        print(f"record {p.record}: {p.problem}", file=sys.stderr)
    line = accuracy_line(programs)
    if line:
        print(line, file=sys.stderr if not args.output else sys.stdout)
    return 0 if len(bad) < len(programs) else 2


def _run_estimate(args) -> int:

    from .tvm_compat import Target  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    predictor = LatencyPredictor.load(args.checkpoint)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        descriptor = predictor.device_of(args.device, json.loads(args.target) if args.target else None)
    if descriptor is None and not args.target:
        raise InputError("--target: the checkpoint records no device; give --target")
    target = Target(json.loads(args.target)) if args.target else Target(descriptor.target)
    tasks, name = load_network(args.network, target)
    database = work_dir_best(Path(args.database)) if args.database else None
    est = estimate_network(predictor, tasks, getattr(descriptor, "device_id", None), target, database, EstimateConfig(samples=args.samples))
    print(f"network {name}")
    print(format_estimate(est))
    if est.measured_total_s is not None:
        print(f"measured (sum of weight x the database's best): {1e3 * est.measured_total_s:.3f} ms")
    if args.json:
        out = est.to_json()
        out["network"] = name
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return 0


TUNE_FLAGS = (
    Flag("--trials", "tune", "trials", dict(type=int, help="global trial budget over all tasks (kept trials count)")),
    Flag("--trials-per-iter", "tune", "trials_per_iter", dict(type=int, help="trials measured per search iteration "
         "of a task")),
    Flag("--cost-model", "tune", "cost_model", dict(choices=["cdmpp", "xgb"], help="cdmpp (this package's plugin) "
         "or xgb (TVM's XGBModel)")),
    Flag("--checkpoint", "tune", "checkpoint", dict(type=Path, help="the plugin's checkpoint (default: the shipped "
         "one)"), short="-c"),
    Flag("--seed", "tune", "seed", dict(type=int, help="seed of the search")),
    Flag("--population", "search", "population_size", dict(type=int, help="candidates the evolutionary search "
         "samples per round")),
    Flag("--measured-ratio", "search", "init_measured_ratio", dict(type=float, help="share of the population "
         "started from the task's best measured programs")),
    Flag("--generations", "search", "genetic_num_iters", dict(type=int, help="generations the population evolves "
         "under the cost model per round")),
    Flag("--eps-greedy", "search", "eps_greedy", dict(type=float, help="share of each round's trials picked at "
         "random instead of by the cost model")),
    Flag("--precision", "tune", "precision", dict(choices=INFERENCE_PRECISIONS, help="how the plugin's "
         "transformer runs: bf16 (bfloat16 matrix products) is faster where the CPU has AVX512-BF16 or AMX; auto picks "
         "it there")),
    Flag("--online-objective", "online", "objective", dict(choices=sorted(OBJECTIVES), help="what the plugin's "
         "residual trees learn from the trials: the log-latency error (squared) or the order of the trials within "
         "each task (pairwise)")),
)
"""The options of ``cdmpp tune`` that set one field of :class:`~cdmpp.tuning.config.TuneConfig`,
:class:`~cdmpp.tuning.config.SearchConfig` or :class:`~cdmpp.tuning.config.OnlineConfig`."""

_TUNE_CONFIGS = {"tune": TuneConfig, "search": SearchConfig, "online": OnlineConfig}


def _run_tune(args) -> int:
    from .device import local_cpu  # noqa: PLC0415  (keeps tvm off this module's import)
    from .tuning.tune import format_tasks, tune_network  # noqa: PLC0415  (keeps tvm off this module's import)

    given = given_fields(args, TUNE_FLAGS)
    cfg = TuneConfig(**given.get("tune", {}), search=SearchConfig(**given.get("search", {})),
                     online=OnlineConfig(**given.get("online", {})))
    if args.target:
        target = json.loads(args.target)
    elif args.device:
        target = LatencyPredictor.load(args.checkpoint).descriptor(args.device).target
    else:
        target = local_cpu().target
    result = tune_network(args.network, Path(args.work_dir), target, cfg, args.device, progress=not args.no_progress)
    print(format_tasks(result))
    print(f"per-task table: {result.work_dir / 'tasks.csv'}")
    if result.interrupted:
        return 130
    print(f"compiled network: {result.library} (Relax VM; main takes the inputs, then the weights in "
          f"{result.work_dir / 'weights.npz'})")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``predict``, ``estimate`` and ``tune`` to the ``cdmpp`` subcommands ``sub``."""
    s = sub.add_parser("predict", help="predicted latency of every program of a JSONDatabase (or a TVM-JSON program)")
    s.add_argument("--work-dir", required=True,
                   help="a MetaSchedule JSONDatabase folder (database_*.json), or a TVM-JSON file of a scheduled program")
    s.add_argument("--device", default=None, help="a device id the checkpoint knows (default: the records' target's)")
    s.add_argument("--protocol", choices=PROTOCOLS, default="cold",
                   help="cold: each program alone after a cache flush, as collected; warm: as it runs inside a "
                        "network, where the checkpoint learned the device's warm protocol (default cold)")
    s.add_argument("-c", "--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    s.add_argument("-o", "--output", default=None, help="CSV file to write (default: standard output)")
    s.set_defaults(func=_run_predict)

    s = sub.add_parser("estimate", help="a whole network's latency: per-task table and total")
    s.add_argument("network", help="a zoo name (cdmpp networks), a Relax IRModule as TVM JSON (.json), or "
                   "module.py:function returning (torch model, example inputs)")
    s.add_argument("--device", default=None, help="a device id the checkpoint knows (default: from --target or this machine)")
    s.add_argument("--target", default=None, help="a TVM target as JSON (default: the device's)")
    s.add_argument("--database", default=None, metavar="WORK_DIR",
                   help="a JSONDatabase folder: tasks it measured use their fastest record")
    s.add_argument("--samples", type=int, default=32, help="schedules sampled per task without a record")
    s.add_argument("-c", "--checkpoint", default=None, help="checkpoint folder (default: the shipped one)")
    s.add_argument("--json", default=None, help="also write the estimate as JSON here")
    s.set_defaults(func=_run_estimate)

    s = sub.add_parser("tune", help="tune a whole network with MetaSchedule and the cdmpp cost model, and build it")
    s.add_argument("network", help="a zoo name (cdmpp networks), a Relax IRModule as TVM JSON (.json), or "
                   "module.py:function returning (torch model, example inputs)")
    s.add_argument("--work-dir", required=True, help="the JSONDatabase folder (an existing one is resumed)")
    add_flags(s, TUNE_FLAGS, _TUNE_CONFIGS)
    s.add_argument("--device", default=None, help="a device id the checkpoint knows: the plugin predicts for it, and "
                   "without --target its target is tuned for")
    s.add_argument("--target", default=None, help="a TVM target as JSON (default: this machine's CPU)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.set_defaults(func=_run_tune)
