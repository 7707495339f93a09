"""The time a network spends between its kernels: the Relax VM's work per kernel call.

A network compiled by Relax runs in its virtual machine, which for every kernel call
looks the kernel up, makes the output tensor from its planned storage and passes the
arguments; an inference also pays a fixed cost to enter ``main`` and return.  None of
this is in a kernel's own latency, so a sum of kernel latencies misses it.

:func:`measure_vm_call` times it on this machine: ``main`` functions that chain 1 and
``calls`` calls of one 16-element kernel (an opaque PrimFunc, so that Relax does not fuse
the chain) are timed end to end in the Relax VM; the difference is the VM's cost per
call (the tiny kernel's own few nanoseconds included), the rest the fixed cost.  The
collector measures it once per CPU collection and keeps it in the device descriptor
(:attr:`cdmpp.device.DeviceDescriptor.vm_call_s`), so that a checkpoint trained on the
folder carries it to the estimate.
"""

from __future__ import annotations

import numpy as np

ELEMENTS = 16


def _chain_module(calls: int):
    """A Relax module whose ``main`` makes ``calls`` calls of one opaque 16-element kernel in a row."""
    from tvm import relax, te  # noqa: PLC0415  (keeps tvm off this module's import)

    x_in = te.placeholder((ELEMENTS,), name="x", dtype="float32")
    y_out = te.compute((ELEMENTS,), lambda i: x_in[i] + 1.0, name="y")
    kernel = te.create_prim_func([x_in, y_out]).with_attr("op_pattern", 8).with_attr("global_symbol", "add_one")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((ELEMENTS,), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            gv = bb.add_func(kernel, "add_one")
            v = x
            for _ in range(calls):
                v = bb.emit(relax.call_tir(gv, [v], relax.TensorType((ELEMENTS,), "float32")))
            out = bb.emit_output(v)
        bb.emit_func_output(out)
    return bb.get()


def measure_vm_call(target, calls: int = 257, repeat: int = 30) -> tuple[float, float]:
    """Time the Relax VM's cost per kernel call and per inference on this CPU.

    Args:
        target: the TVM ``Target`` (a CPU target) the chains are compiled for.
        calls: kernel calls in the long chain (at least 2).
        repeat: timed runs of each chain (median; 10 calls of ``main`` per run).

    Returns:
        ``(seconds per kernel call, seconds per inference outside any call)``; the second
        is clipped at 0.

    Raises:
        ValueError: ``calls`` below 2 or ``repeat`` below 1.
    """
    import tvm  # noqa: PLC0415  (keeps tvm off this module's import)
    from tvm import relax  # noqa: PLC0415  (tvm)

    if calls < 2 or repeat < 1:
        raise ValueError(f"calls must be >= 2 and repeat >= 1, got {calls} and {repeat}")
    tvm_device = tvm.cpu()
    x = tvm.runtime.tensor(np.zeros(ELEMENTS, dtype="float32"), tvm_device)
    medians = []
    for n in (1, calls):
        vm = relax.VirtualMachine(tvm.compile(_chain_module(n), target), tvm_device)
        vm["main"](x)  # warm-up
        medians.append(float(np.median(vm.time_evaluator("main", tvm_device, number=10, repeat=repeat)(x).results)))
    per_call = max((medians[1] - medians[0]) / (calls - 1), 0.0)
    return per_call, max(medians[0] - per_call, 0.0)
