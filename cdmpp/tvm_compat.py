"""The one adapter module for TVM imports whose paths move between TVM versions.

Every other module of cdmpp imports TVM's MetaSchedule, TensorIR and target APIs
from here, so a TVM upgrade touches one file.  Written against
``apache-tvm==0.27.0.post1`` (MetaSchedule at ``tvm.s_tir.meta_schedule``, TIR at
``tvm.tirx``).

Importing this module imports TVM (about 1-2 s) but not
``tvm.s_tir.tensor_intrin`` (22-45 s), which :func:`load_tensor_intrinsics`
imports on demand (about 1 s for a CPU target).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import sys
import tempfile

import numpy as np
import tvm
import tvm.s_tir
from tvm import IRModule, relax, tirx
from tvm.driver import build as tvm_build
from tvm.ir import load_json, save_json
from tvm.ir.utils import derived_object
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.analysis import estimate_tir_flops
from tvm.s_tir.meta_schedule import _ffi_api
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.builder import BuilderInput, LocalBuilder
from tvm.s_tir.meta_schedule.builder.local_builder import _serialize_params, _worker_func
from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord, Workload
from tvm.s_tir.meta_schedule.logging import get_logger, get_logging_func
from tvm.s_tir.meta_schedule.runner import EvaluatorConfig, LocalRunner, RPCConfig, RPCRunner, RunnerInput
from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument as _local_alloc_argument
from tvm.s_tir.meta_schedule.runner.rpc_runner import default_alloc_argument as _rpc_alloc_argument
from tvm.s_tir.meta_schedule.runner.utils import run_evaluator_common as _ms_run_evaluator_common
from tvm.s_tir.schedule import Trace
from tvm.s_tir.stmt import SBlock, SBlockRealize
from tvm.s_tir.transform import LowerCrossThreadReduction, LowerInitBlock, RemoveWeightLayoutRewriteBlock
from tvm.support.popen_pool import PopenWorker
from tvm.target import Target
from tvm.tirx import PrimFunc
from tvm_ffi import structural_equal, structural_hash

from cdmpp.errors import DeviceUnavailableError

__all__ = [
    "tvm",
    "tirx",
    "relax",
    "from_exported_program",
    "ms",
    "IRModule",
    "PrimFunc",
    "Schedule",
    "Target",
    "SBlock",
    "SBlockRealize",
    "ArgInfo",
    "BuilderInput",
    "LocalBuilder",
    "RunnerInput",
    "LocalRunner",
    "RPCConfig",
    "RPCRunner",
    "EvaluatorConfig",
    "JSONDatabase",
    "TuningRecord",
    "Workload",
    "derived_object",
    "estimate_tir_flops",
    "structural_equal",
    "structural_hash",
    "load_json",
    "save_json",
    "load_tensor_intrinsics",
    "export_shared_library",
    "tvm_version",
    "build_for_measurement",
    "configure_cuda_compiler",
    "imported_source",
    "lower_gpu_reductions",
    "runs_as_view",
    "alloc_arguments_in_bounds",
    "rpc_alloc_arguments_in_bounds",
    "default_alloc_argument",
    "run_evaluator_common",
    "apply_trace_json",
]


def tvm_version() -> str:
    """The installed TVM version string, e.g. ``"0.27.0.post1"``."""
    return str(tvm.__version__)


# Submodules of ``tvm.s_tir.tensor_intrin`` by target kind.  The package's ``__init__``
# imports all of them; CUDA's alone takes about 15 s of the 22 s on a 2-core Zen 4 VM, and
# an ``llvm`` target's schedule rules only use the CPU ones.
_TENSOR_INTRIN_MODULES = {
    "llvm": ("x86", "arm_cpu", "riscv_cpu"),
    "all": ("cuda", "arm_cpu", "x86", "rocm", "hexagon", "riscv_cpu"),
}


def load_tensor_intrinsics(target: Target | dict | str | None = None) -> None:
    """Register TVM's tensor intrinsics, which design-space generation needs.

    ``ms.TuneContext`` imports the whole ``tvm.s_tir.tensor_intrin`` package (about 22 s
    on a 2-core VM, 15 s of it CUDA's intrinsics).  For an ``llvm`` target this
    registers only the CPU intrinsics (about 1 s): it enters the package without running
    its ``__init__`` and imports the CPU submodules, so a later ``TuneContext`` of this
    process finds the package loaded.  Any other target, or ``None``, registers all of
    them.  A process that first loads the CPU set and then tunes a GPU target with
    TVM's own API (not through cdmpp) must call this with the GPU target first.

    Args:
        target: the target the design spaces are generated for (``None``: all targets).
    """

    kind = "all"
    if target is not None:
        kind = (target if isinstance(target, Target) else Target(target)).kind.name
    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        if kind not in _TENSOR_INTRIN_MODULES:
            importlib.import_module(name)
            return
        spec = importlib.util.find_spec(name)
        package = importlib.util.module_from_spec(spec)  # its __init__ is not run
        sys.modules[name] = package
        tvm.s_tir.tensor_intrin = package
    for sub in _TENSOR_INTRIN_MODULES.get(kind, _TENSOR_INTRIN_MODULES["all"]):
        importlib.import_module(f"{name}.{sub}")


def build_for_measurement(mod: IRModule, target: Target, _params=None):
    """Build function for :class:`LocalBuilder` workers.

    TVM's default build imports ``tvm.s_tir.tensor_intrin`` in every fresh worker,
    which takes longer than the builder timeout on a 2-core machine; this one does not
    (see ``shared/notes/tvm-0.27.md``).  Returns the runtime module of
    ``tvm.driver.build`` (``tvm.compile``'s Executable breaks ``export_library``).
    """

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def popen_worker(maximum_uses: int | None = None):
    """A TVM ``PopenWorker``: one long-lived Python process that runs the functions sent
    to it (``send`` then ``recv``), restarted after ``maximum_uses`` of them."""

    return PopenWorker(maximum_uses=maximum_uses)


def popen_worker_pid(worker) -> int | None:
    """The process id of a ``PopenWorker``'s process, ``None`` while it has none (TVM keeps
    the ``subprocess.Popen`` in a private attribute)."""
    proc = getattr(worker, "_proc", None)
    return None if proc is None else proc.pid


def build_worker_function(args: tuple) -> str:
    """MetaSchedule ``LocalBuilder``'s build-and-export of one program, as its workers run
    it: ``args`` = ``(f_build, f_export, mod, target, serialized params)``; returns the
    artifact path."""

    return _worker_func(*args)


def serialize_build_params(params):
    """``BuilderInput.params`` in the form :func:`build_worker_function` takes."""

    return _serialize_params(params)


def export_shared_library(mod) -> str:
    """Export function for build workers: the built module as a shared library, linked
    with the host's compiler in the worker, so that the runner only loads it (MetaSchedule's
    default exports a tar archive that the runner links before it can time anything).
    For programs timed on this host only.

    Returns:
        The path of the ``.so`` file, in a fresh temporary folder.
    """

    path = os.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
    mod.export_library(path)
    return path


def configure_cuda_compiler() -> str:
    """Choose how TVM compiles generated CUDA source to a GPU binary, for this process and
    the workers it starts (``TVM_CUDA_COMPILE_MODE``).  TVM 0.27 builds a CUDA program to
    source and compiles it when the runner loads it on the GPU host.

    TVM 0.27 defaults to NVRTC through the ``cuda-bindings`` package; without that
    package, ``nvcc`` on the ``PATH`` is used instead.  A mode the user set is kept.

    Returns:
        ``"nvrtc"`` or ``"nvcc"``.

    Raises:
        RuntimeError: neither ``cuda-bindings`` nor ``nvcc`` is available.
    """
    mode = os.environ.get("TVM_CUDA_COMPILE_MODE")
    if mode:
        return mode.lower()
    try:
        has_nvrtc = importlib.util.find_spec("cuda.bindings") is not None
    except ModuleNotFoundError:
        has_nvrtc = False
    if has_nvrtc:
        return "nvrtc"
    if shutil.which("nvcc"):
        os.environ["TVM_CUDA_COMPILE_MODE"] = "nvcc"
        return "nvcc"
    raise DeviceUnavailableError(
        "cannot compile CUDA programs: install the CUDA toolkit (nvcc on the PATH) or `pip install cuda-bindings`"
    )


def imported_source(rt_mod) -> str:
    """The generated source of the first imported device module of a built runtime module
    (CUDA C for a CUDA build, which TVM 0.27 keeps as source and compiles when the module
    is loaded on the GPU host), or ``""`` when it has none."""
    for sub in rt_mod.imports:
        src = sub.inspect_source()
        if src:
            return str(src)
    return ""


def lower_gpu_reductions(mod: IRModule) -> IRModule:
    """Lower cross-thread reductions and reduction init blocks of a scheduled GPU program.

    ``PerStoreFeature`` applies these passes before it extracts its rows; the featurizer
    applies them to GPU programs before walking the loop nest, so that its leaves and
    those rows name the same buffers in the same order (in the tests, at least 90% of a
    CUDA program's leaves find their row; the final store of a cross-thread reduction
    may not).
    """

    return LowerInitBlock()(LowerCrossThreadReduction()(mod))


def extract_tasks(mod: IRModule, target: Target):
    """MetaSchedule tuning tasks of a Relax IRModule (``ms.relax_integration.extract_tasks``)."""
    return ms.relax_integration.extract_tasks(mod, target)


def runs_as_view(mod: IRModule) -> bool:
    """Whether a task's PrimFunc is a pure reshape (reshape, expand_dims, squeeze, flatten:
    ``relax.analysis.has_reshape_pattern``), which Relax's build turns back into
    ``R.reshape`` (``RewriteDataflowReshape``), a view of its input: the deployed network
    calls no kernel for it.  ``False`` when it cannot prove the pattern."""
    funcs = [f for f in mod.functions.values() if isinstance(f, PrimFunc)]
    return len(funcs) == 1 and bool(relax.analysis.has_reshape_pattern(funcs[0]))


def feature_context(target: Target, num_threads: int | None = None):
    """A bare TuneContext for feature extraction.

    ``ms.TuneContext(...)`` imports ``tvm.s_tir.tensor_intrin`` (35-45 s on 2 cores);
    ``PerStoreFeature`` needs only the target, so this calls the FFI constructor directly.
    ``PerStoreFeature`` extracts the candidates in parallel on the context's
    ``num_threads`` (default: all cores).
    """


    threads = int(num_threads or os.cpu_count() or 1)
    return _ffi_api.TuneContext(None, target, None, None, "main", threads, -1, get_logging_func(get_logger(__name__)))


def per_store_features(target: Target, mods: list) -> list:
    """TVM's ``PerStoreFeature`` rows (float32 ``(R_i, 164)`` each) of scheduled IRModules
    or Schedules (a Schedule is used as it is: building one from a module costs about as
    much as half the extraction)."""
    ctx = feature_context(target)
    cands = []
    for m in mods:
        sch = m if isinstance(m, Schedule) else Schedule(m)
        cands.append(ms.MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod)))
    out = ms.feature_extractor.PerStoreFeature().extract_from(ctx, cands)
    return [o.numpy().astype("float32") for o in out]


def schedule_from_json(workload, trace_json) -> Schedule:
    """A tuning record's scheduled program from its JSON: the workload's module with the
    trace's JSON replayed once (what ``TuningRecord.from_json`` and then
    :func:`program_from_record` build, with one replay instead of two).

    Args:
        workload: a MetaSchedule ``Workload``.
        trace_json: the first field of a JSONDatabase record line (the trace's JSON).
    """
    sch = Schedule(workload.mod)
    tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    return sch


def program_from_record(record) -> IRModule:
    """Rebuild a tuning record's scheduled program: its workload with its trace replayed."""
    sch = Schedule(record.workload.mod)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def _fill_index_arguments(repeated_args: list, args_info, index_bounds, seed: int) -> list:

    rng = np.random.default_rng(seed)
    for args in repeated_args:
        for pos, bound in index_bounds:
            _, dtype, shape = args_info[pos]
            args[pos].copyfrom(np.asarray(rng.integers(0, max(int(bound), 1), size=tuple(shape))).astype(str(dtype)))
    return repeated_args


def alloc_arguments_in_bounds(device, args_info, alloc_repeat: int, index_bounds=(), seed: int = 0) -> list:
    """``f_alloc_argument`` of :class:`LocalRunner` for programs that gather by index.

    TVM's default fill writes the bytes of floats between 1 and 10 into every tensor,
    which in an ``int64`` index tensor is an index beyond any table, so the runner
    crashes in a gather (``take``).  This keeps TVM's fill, then fills each integer
    argument ``pos`` of ``index_bounds`` (``(pos, bound)`` pairs, see
    :func:`cdmpp.collect.index_bounds`) with indices drawn uniformly from ``[0, bound)``
    (NumPy ``default_rng(seed)``), as a real token-id or position input would be.

    Returns:
        ``alloc_repeat`` lists of argument tensors on ``device``.
    """
    return _fill_index_arguments(_local_alloc_argument(device, args_info, alloc_repeat), args_info, index_bounds, seed)


def rpc_alloc_arguments_in_bounds(session, device, args_info, alloc_repeat: int, index_bounds=(), seed: int = 0) -> list:
    """:func:`alloc_arguments_in_bounds` for :class:`RPCRunner` (tensors on the remote ``device``)."""
    repeated = _rpc_alloc_argument(session, device, args_info, alloc_repeat)
    return _fill_index_arguments(repeated, args_info, index_bounds, seed)


def default_alloc_argument(device, args_info, alloc_repeat: int) -> list:
    """MetaSchedule's ``LocalRunner`` argument allocation (TVM's random fill), for wrappers."""
    return _local_alloc_argument(device, args_info, alloc_repeat)


def run_evaluator_common(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """MetaSchedule's time evaluator: seconds per repeat, one float per repeat."""
    return _ms_run_evaluator_common(rt_mod, device, evaluator_config, repeated_args)


def apply_trace_json(trace_json, sch: Schedule) -> None:
    """Replay a schedule trace in its JSON form (a tuning record's ``trace``) on ``sch``."""

    Trace.apply_json_to_schedule(trace_json, sch)


def from_exported_program(exported, keep_params_as_input: bool = True) -> IRModule:
    """TVM's Relax frontend of a ``torch.export`` program (imported on first use: it loads torch)."""
    from tvm.relax.frontend.torch import from_exported_program as frontend  # noqa: PLC0415  (keeps torch off this module's import)

    return frontend(exported, keep_params_as_input=keep_params_as_input)
