"""The torch -> Relax import as a deployment runs it: computations on the weights alone
leave the per-call ``main`` for a function run once at load."""

import re

MLP_PY = '''
import torch


class MLP(torch.nn.Module):
    """Two dense layers, and a transpose of the input (an activation, which stays per call)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(32, 16)
        self.b = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x.t())))


def build():
    torch.manual_seed(1)
    return MLP(), (torch.randn(32, 4),)
'''


def _mlp():
    ns: dict = {}
    exec(MLP_PY, ns)  # noqa: S102  the test's own network
    return ns["build"]()


def test_a_linear_network_imports_with_no_parameter_transpose_in_main():
    from cdmpp.network_input import relax_network
    from cdmpp.relax_import import LOAD_TIME_FUNCTION
    from cdmpp.tvm_compat import Target, tirx

    model, inputs = _mlp()
    net = relax_network("mlp", model, inputs, Target({"kind": "llvm", "num-cores": 2}))
    main = net.unfused["main"].script()
    params = [str(p.name) for p in net.unfused["main"].params]
    transposed = re.findall(r"R\.permute_dims\((\w+)", main)
    assert transposed == [params[0]]  # the input's transpose alone: no weight is transposed per call
    assert len(re.findall(r"R\.permute_dims\(", net.load_time[LOAD_TIME_FUNCTION].script())) == 2  # both weights
    assert [gv.name_hint for gv in net.unfused.functions] == ["main"]
    tasks = [gv.name_hint for gv, f in net.mod.functions.items() if isinstance(f, tirx.PrimFunc)]
    assert sum("transpose" in t for t in tasks) == 1 and len(tasks) >= 2  # the input's transpose, then the layers
    assert len(net.weights) == 4 and len(params) == 1 + 4  # the input, then what the load-time function returns


def test_the_import_rewrites_bool_comparisons_and_cumsums_that_tvm_cannot_compile():
    """A causal mask compares ``bool`` tensors and sums them (``transformers``' mask code);
    TVM 0.27 imports both as ``bool`` ops that its LLVM code generator rejects."""
    import torch

    from cdmpp.relax_import import import_torch

    class Mask(torch.nn.Module):
        def forward(self, x):
            a, b = x > 0, x < 1
            return (a == b).cumsum(-1) + (a != b).to(torch.int64)

    per_call, _, _ = import_torch(Mask(), (torch.randn(2, 8),))
    main = per_call["main"].script()
    for op in ("equal", "not_equal"):
        calls = re.findall(rf"= R\.{op}\(([^)]*)\)", main)
        assert calls and all("bool" not in c for c in calls)
    args = dict(re.findall(r"(\w+): R\.Tensor\(\([^)]*\), dtype=\"(\w+)\"\) = R\.cumsum", main))
    assert args and set(args.values()) == {"int64"}  # torch sums a bool tensor as int64
