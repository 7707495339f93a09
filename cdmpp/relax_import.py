"""PyTorch models into Relax as a deployment runs them: ``torch.export`` to Relax with the
weights detached, bool repairs for TVM 0.27's code generation, and the computations on
weights alone lifted into a function run once at load."""

from __future__ import annotations

from .tvm_compat import IRModule, Target, from_exported_program, relax, tvm


def relax_module_from_torch(model, example_inputs: tuple, target: Target) -> IRModule:
    """Lower a ``torch.nn.Module`` to a Relax IRModule ready for task extraction: the
    per-call function of :func:`import_torch`, fused (:func:`fuse_relax`)."""
    return fuse_relax(import_torch(model, example_inputs)[0], target)


#: Relax comparison ops that TVM 0.27's LLVM code generator cannot emit on ``bool`` operands
#: (it compares them as floats: ``fcmp oeq i1``, which LLVM's verifier rejects)
_BOOL_COMPARISONS = frozenset(f"relax.{op}" for op in (
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal"))


def _is_bool(expr) -> bool:
    return str(getattr(getattr(expr, "ty", None), "dtype", "")) == "bool"


@relax.expr_functor.mutator
class _BoolRepair(relax.PyExprMutator):
    """Rewrites the two ``bool`` patterns of torch's causal masks that TVM 0.27 imports but
    cannot compile: a comparison of ``bool`` tensors (compared as ``int8`` instead), and a
    ``cumsum`` of a ``bool`` tensor (summed as ``int64``, torch's promotion; the Relax
    frontend keeps ``bool`` and the LLVM code generator stops in ``CreateAdd``)."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        name = call.op.name if isinstance(call.op, tvm.ir.Op) else ""
        if name in _BOOL_COMPARISONS and all(_is_bool(a) for a in call.args[:2]):
            return relax.Call(call.op, [relax.op.astype(a, "int8") for a in call.args[:2]], call.attrs)
        if name == "relax.cumsum" and _is_bool(call.args[0]):
            a = call.attrs
            return relax.op.cumsum(relax.op.astype(call.args[0], "int64"), axis=a.axis,
                                   dtype=a.dtype if a.dtype and str(a.dtype) != "bool" else None,
                                   exclusive=a.exclusive)
        return call


def repair_bool_ops(mod: IRModule) -> IRModule:
    """``mod`` with every Relax function's ``bool`` comparisons and ``bool`` cumsums
    rewritten so that TVM 0.27 compiles them (:class:`_BoolRepair`); same results."""
    mutator = _BoolRepair(mod)
    for gv, func in list(mod.functions.items()):
        if isinstance(func, relax.Function):
            mod[gv] = mutator.visit_expr(func)
    return mod


#: the function :func:`import_torch` lifts the parameter-only computations into
LOAD_TIME_FUNCTION = "main_transform_params"


def import_torch(model, example_inputs: tuple) -> tuple[IRModule, IRModule, list]:
    """Import a ``torch.nn.Module`` as it is deployed: the per-call function, and the
    computations on the weights alone lifted into a function run once at load.

    ``torch.export`` -> Relax frontend (weights as inputs of ``main``, then detached) ->
    :func:`repair_bool_ops` -> inference decomposition -> ``relax.transform.LiftTransformParams``,
    which moves every computation on the weights alone (the transpose of each
    ``nn.Linear`` weight, a bias reshape, a batch norm folded to a scale and a shift) out
    of ``main`` into ``main_transform_params``.

    Args:
        model: a ``torch.nn.Module`` (put in eval mode).
        example_inputs: its example input tensors (torch).

    Returns:
        ``(per_call, load_time, weights)``: ``per_call`` an IRModule holding ``main``
        alone, unfused (the form ``ms.relax_integration.compile_relax`` takes; it
        legalizes and fuses itself), which takes the inputs and then the load-time
        function's outputs; ``load_time`` an IRModule holding
        :data:`LOAD_TIME_FUNCTION`, which takes the model's weights as one tuple;
        ``weights`` those weights (``tvm.runtime.Tensor`` each, in the model's order).
        :func:`load_time_params` runs one on the other.

    Raises:
        whatever ``torch.export`` and TVM's frontend raise for a model they cannot import.
    """
    import torch  # noqa: PLC0415  (keeps torch off this module's import)

    with torch.no_grad():
        exported = torch.export.export(model.eval(), example_inputs)
    mod = from_exported_program(exported, keep_params_as_input=True)
    mod, params = relax.frontend.detach_params(mod)
    mod = repair_bool_ops(mod)
    mod = tvm.ir.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                       relax.transform.CanonicalizeBindings(),
                                       relax.transform.LiftTransformParams()])(mod)
    per_call = relax.transform.DeadCodeElimination(["main"])(IRModule({"main": mod["main"]}))
    load_time = IRModule({LOAD_TIME_FUNCTION: mod[LOAD_TIME_FUNCTION]})
    return per_call, load_time, list(params.get("main", []))


def fuse_relax(mod: IRModule, target: Target) -> IRModule:
    """A per-call module of :func:`import_torch` through the ``zero`` pipeline (legalized
    and fused into PrimFuncs: the tuning tasks), for ``target``."""
    with target:
        return relax.get_pipeline("zero")(mod)


def load_time_params(load_time: IRModule, weights: list, target: Target) -> list:
    """Run the load-time function of :func:`import_torch` once on the model's weights.

    It is compiled with TVM's default schedules for ``target`` (a CPU target) and run on
    the CPU.

    Returns:
        the weights the per-call ``main`` takes after its inputs (``tvm.runtime.Tensor``
        each, in order).
    """
    executable = tvm.compile(load_time, target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return list(vm[LOAD_TIME_FUNCTION](list(weights)))
