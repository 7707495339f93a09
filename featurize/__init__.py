"""Featurizer: scheduled TensorIR programs -> compact ASTs with leaf feature vectors.

Public entry points:

* :func:`featurize` -- one program (PrimFunc, IRModule, Schedule or TuningRecord).
* :func:`featurize_many` -- many programs (optionally with TVM's ``PerStoreFeature`` rows).
* :func:`featurize_each` -- many programs, each on its own when one fails (the policy
  every prediction path uses).
* :class:`ProgramAST` -- the result; :mod:`cdmpp.featurize.batch` collates them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .ast import (
    FEATURE_DIM,
    FEATURE_NAMES,
    LEAF,
    LOOP_KIND_NAMES,
    OWN_FEATURES,
    PSF_DIM,
    ROOT,
    ProgramAST,
    UnsupportedProgramError,
    build_tree,
    single_func,
)

__all__ = [
    "FEATURE_DIM",
    "FEATURE_NAMES",
    "LEAF",
    "LOOP_KIND_NAMES",
    "OWN_FEATURES",
    "PSF_DIM",
    "ROOT",
    "ProgramAST",
    "UnsupportedProgramError",
    "build_tree",
    "featurize",
    "featurize_many",
    "featurize_each",
    "as_module",
]


def as_module(program):
    """The scheduled IRModule of a PrimFunc, IRModule, Schedule or TuningRecord.

    A TuningRecord is rebuilt from its workload by replaying its schedule trace.

    Raises:
        UnsupportedProgramError: any other input type, or a trace that does not replay.
    """
    from cdmpp.tvm_compat import IRModule, PrimFunc, Schedule, TuningRecord, program_from_record  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if isinstance(program, TuningRecord):
        try:
            return program_from_record(program)
        except Exception as err:  # noqa: BLE001  TVM raises its own error types
            raise UnsupportedProgramError(f"the tuning record's trace does not replay: {err}") from err
    if isinstance(program, Schedule):
        return program.mod
    if isinstance(program, PrimFunc):
        return IRModule({"main": program.with_attr("global_symbol", "main")})
    if isinstance(program, IRModule):
        single_func(program)  # raises unless it holds exactly one PrimFunc
        return program
    raise UnsupportedProgramError(
        f"expected a scheduled PrimFunc, IRModule, Schedule or TuningRecord, got {type(program).__name__}"
    )


def _default_target(target):
    from cdmpp.tvm_compat import Target  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)

    if target is None:
        return Target({"kind": "llvm", "num-cores": 1})
    return target if isinstance(target, Target) else Target(target)


def _is_gpu(target) -> bool:
    return "gpu" in [str(k) for k in target.keys]


def featurize(program, target=None, psf: bool = False) -> ProgramAST:
    """Featurize one scheduled program.

    Args:
        program: a scheduled PrimFunc, a one-PrimFunc IRModule, a Schedule, or a
            MetaSchedule TuningRecord (its trace is replayed on its workload).
        target: TVM target (``Target``, dict or tag); defaults to a generic LLVM CPU
            target.  For a GPU target (e.g. CUDA) the program's cross-thread reductions
            and init blocks are lowered first, as ``PerStoreFeature`` does, and its
            ``threadIdx``/``blockIdx`` loops become ``THREAD_BINDING`` nodes.
        psf: also extract TVM's ``PerStoreFeature`` rows (``ProgramAST.psf``, for the
            baselines; about 3 ms per program on top of the walk's 0.8 ms).

    Returns:
        The compact AST with ``leaf_features`` float32 ``(L, FEATURE_DIM)``.

    Raises:
        UnsupportedProgramError: the input or one of its constructs is not supported.
    """
    return featurize_many([program], target, psf)[0]


def featurize_many(programs, target=None, psf: bool = False) -> list[ProgramAST]:
    """Featurize many programs (see :func:`featurize`); with ``psf``, ``PerStoreFeature``
    runs once for all of them.

    Raises:
        UnsupportedProgramError: naming the index of the first program that failed.
    """
    from cdmpp.tvm_compat import (  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)
        Schedule,  # noqa: PLC0415  (keeps tvm, tvm_ffi off this module's import)
        lower_gpu_reductions,
        per_store_features,
    )

    target = _default_target(target)
    mods = []
    for i, p in enumerate(programs):
        try:
            mods.append(as_module(p))
        except UnsupportedProgramError as err:
            raise UnsupportedProgramError(f"program {i}: {err}") from err
    rows = [None] * len(mods)
    if psf and mods:
        # a Schedule goes to PerStoreFeature as it is (no second Schedule built from its module)
        sources = [p if isinstance(p, Schedule) else m for p, m in zip(programs, mods)]
        try:
            rows = per_store_features(target, sources)
        except Exception as err:  # noqa: BLE001
            raise UnsupportedProgramError(f"PerStoreFeature extraction failed: {str(err)[:300]}") from err
    trees = mods
    if _is_gpu(target):
        try:
            trees = [lower_gpu_reductions(m) for m in mods]
        except Exception as err:  # noqa: BLE001
            raise UnsupportedProgramError(f"lowering the GPU programs' reductions failed: {str(err)[:300]}") from err
    out = []
    for i, (m, r) in enumerate(zip(trees, rows)):
        try:
            out.append(build_tree(m, r))
        except UnsupportedProgramError as err:
            raise UnsupportedProgramError(f"program {i}: {err}") from err
    return out


log = logging.getLogger("cdmpp.featurize")


def featurize_each(programs: Sequence, target=None, names: Sequence[str] | None = None
                   ) -> tuple[list[ProgramAST | None], list[str]]:
    """Featurize many programs so that one bad program does not sink the others: the one
    error policy of every prediction path (``cdmpp predict``, ``estimate``, the plugin).

    All programs are featurized at once; when that fails, one by one.  A program that
    cannot be featurized gets ``None`` and a problem string, and is named in the log
    (logger ``cdmpp.featurize``, level WARNING) as scored unknown.  None is dropped.

    Args:
        programs: PrimFuncs, IRModules, Schedules or TuningRecords.
        target: as for :func:`featurize`.
        names: a name of each program for the log (default ``program <index>``).

    Returns:
        ``(trees, problems)``, both ``len(programs)`` long: a :class:`ProgramAST` or
        ``None``, and ``""`` or why the program has no tree.
    """
    programs = list(programs)
    try:
        return featurize_many(programs, target), [""] * len(programs)
    except Exception:  # noqa: BLE001  TVM raises its own error types; find the culprits one by one
        pass
    trees: list[ProgramAST | None] = []
    problems: list[str] = []
    for i, program in enumerate(programs):
        try:
            trees.append(featurize_many([program], target)[0])
            problems.append("")
        except Exception as err:  # noqa: BLE001
            why = str(err).strip().removeprefix("program 0: ")[:200]
            log.warning("%s cannot be featurized, scored as unknown: %s", names[i] if names else f"program {i}", why)
            trees.append(None)
            problems.append(f"cannot be featurized: {why}")
    return trees, problems
