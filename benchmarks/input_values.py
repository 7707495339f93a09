"""``cdmpp bench input-values``: does a kernel's latency depend on the values of its inputs?

The collector times every program on TVM's random fill (MetaSchedule's ``LocalRunner``
default: every float between 1 and 10).  A kernel whose loops call the C math library
(``erff`` for GELU's ``erf``, ``expf``) takes a path through it that depends on each
value: glibc's ``erff`` computes two exponentials for ``1.25 <= |x| < 6`` and a short
polynomial below, so a GELU kernel timed on TVM's fill can be several times slower than
the same kernel inside a network, whose activations are mostly near zero.

For each work dir (``cdmpp tune --work-dir``, tuned on this machine), this builds the
fastest record of every workload whose PrimFunc calls one of ``--match`` (default
``erf``), then times it on this CPU with the same program and the same timer under
several fills: TVM's fill, a standard normal, a normal of scale 0.1, and zeros.  Each
is ``number`` runs per repeat, the median of ``repeat`` repeats, no cache flush, after a
quiet-machine wait (:class:`cdmpp.collect.QuietGuard`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from benchmarks import print_and_write_rows, render_table
from cdmpp.collect import QuietConfig, QuietGuard
from cdmpp.device import local_cpu
from cdmpp.errors import InputError
from cdmpp.estimate import work_dir_best
from cdmpp.tvm_compat import Target, build_for_measurement, default_alloc_argument, program_from_record, tvm

FILLS = ("tvm", "normal(0, 1)", "normal(0, 0.1)", "zeros")
"""The fills compared: TVM's (what the collector times with), two normals, zeros."""


def _fill(name: str, shape: tuple, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """A host array of ``shape`` and ``dtype`` filled as ``name`` says (not ``"tvm"``)."""
    if name == "zeros":
        return np.zeros(shape, dtype=dtype)
    scale = 1.0 if name == "normal(0, 1)" else 0.1
    return (scale * rng.standard_normal(shape)).astype(dtype)


def time_under_fills(work_dirs: list[Path], match: tuple[str, ...] = ("erf",), number: int = 3,
                     repeat: int = 5, seed: int = 0) -> list[dict]:
    """Time each matching workload's fastest record of each work dir under each of :data:`FILLS`.

    Args:
        work_dirs: MetaSchedule JSONDatabase folders tuned on this machine.
        match: TIR intrinsic names (``erf``, ``exp``, ``tanh``); a workload is kept when
            its PrimFunc's TVMScript calls ``T.<name>(``.
        number, repeat: runs per repeat and repeats of the timer (the median repeat is kept).
        seed: seed of the normal fills (NumPy ``default_rng``).

    Returns:
        One row per kept workload: ``work_dir``, ``workload_key``, ``shape`` (its first
        argument's), ``recorded_s`` (the record's own measured latency, the collector's cold
        protocol) and ``fills`` (``{fill: median seconds}``); seconds.

    Raises:
        InputError: a work dir that is not a JSONDatabase folder.
    """
    target = Target(local_cpu().target)
    dev = tvm.cpu()
    guard = QuietGuard(QuietConfig())
    rng = np.random.default_rng(seed)
    rows = []
    for wd in work_dirs:
        for key, (mod, best) in work_dir_best(Path(wd)).items():
            text = mod.script()
            if not any(f"T.{name}(" in text for name in match):
                continue
            rt = build_for_measurement(program_from_record(best.record), target)
            info = [(tuple(int(d) for d in a.shape), str(a.dtype)) for a in best.record.args_info]
            fills = {}
            for name in FILLS:
                if name == "tvm":
                    args = default_alloc_argument(dev, [a.as_json() for a in best.record.args_info], 1)[0]
                else:
                    args = [tvm.runtime.tensor(_fill(name, s, d, rng), dev) for s, d in info]
                guard.wait_quiet()
                timer = rt.time_evaluator("main", dev, number=number, repeat=repeat)
                fills[name] = float(np.median(list(timer(*args).results)))
            rows.append({"work_dir": str(wd), "workload_key": key, "shape": list(info[0][0]),
                         "recorded_s": best.measured_s, "fills": fills})
    return rows


def format_input_values(rows: list[dict], markdown: bool = False) -> str:
    """The rows as a table (milliseconds), with TVM's fill over each other fill."""
    head = ["work dir", "first argument", "recorded ms", *(f"{f} ms" for f in FILLS),
            *(f"tvm / {f}" for f in FILLS[1:])]
    body = []
    for r in rows:
        f = r["fills"]
        body.append([Path(r["work_dir"]).name, "x".join(map(str, r["shape"])), f"{1e3 * r['recorded_s']:.3f}",
                     *(f"{1e3 * f[k]:.3f}" for k in FILLS), *(f"{f['tvm'] / f[k]:.2f}" for k in FILLS[1:])])
    return render_table(head, body, markdown)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``cdmpp bench input-values``'s arguments."""
    parser.add_argument("--work-dirs", nargs="+", required=True,
                        help="tuning work dirs (cdmpp tune --work-dir) tuned on this machine")
    parser.add_argument("--match", nargs="+", default=["erf"],
                        help="TIR intrinsics a workload must call to be timed (default: erf)")
    parser.add_argument("--number", type=int, default=3, help="runs per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="repeats (the median is kept)")
    parser.add_argument("--output", default=None, help="also write the rows as JSON here (the table beside it, .md)")


def main(args: argparse.Namespace) -> int:
    """``cdmpp bench input-values``."""
    if args.number < 1 or args.repeat < 1:
        raise InputError(f"--number and --repeat must be >= 1, got {args.number} and {args.repeat}")
    rows = time_under_fills([Path(w) for w in args.work_dirs], tuple(args.match), args.number, args.repeat)
    print_and_write_rows(rows, format_input_values(rows, markdown=True), args.output)
    return 0
