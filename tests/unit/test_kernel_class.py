"""Kernel classes: untunable tasks (one program in the design space) and tunable ones, and
each class's level as the truth check and the estimate report it."""

import math

import pytest


def test_class_levels_expose_a_model_that_places_untunable_tasks_badly():
    """A model exact on the tunable tasks and 2x slow on every untunable one: the tunable
    class is placed, the untunable one is not, and the pooled sum would hide part of it."""
    from cdmpp.kernel_class import TUNABLE, UNTUNABLE, class_levels

    rows = [(TUNABLE, 2, 1e-3, 1e-3), (TUNABLE, 1, 4e-3, 4e-3),
            (UNTUNABLE, 3, 2e-5, 1e-5), (UNTUNABLE, 1, 6e-5, 3e-5), (UNTUNABLE, 1, float("nan"), 1e-5)]
    levels = class_levels(rows)
    tun, unt = levels[TUNABLE], levels[UNTUNABLE]
    assert (tun.tasks, tun.calls, tun.within, tun.mean_log_ratio, tun.worst_ratio) == (2, 3, 1.0, 0.0, 1.0)
    assert (unt.tasks, unt.calls, unt.within) == (2, 4, 0.0)  # the NaN prediction is left out
    assert unt.mean_log_ratio == pytest.approx(math.log(2)) and unt.worst_ratio == pytest.approx(2.0)
    assert unt.measured_s == pytest.approx(6e-5) and unt.predicted_s == pytest.approx(1.2e-4)


def test_kernel_class_of_a_dense_layer_and_of_a_transpose():
    import torch

    from cdmpp.estimate import relax_tasks
    from cdmpp.kernel_class import TUNABLE, UNTUNABLE, kernel_class
    from cdmpp.network_input import relax_network
    from cdmpp.tvm_compat import Target

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dense = torch.nn.Linear(32, 16)

        def forward(self, x):
            return torch.relu(self.dense(x.t()))

    target = Target({"kind": "llvm", "num-cores": 2})
    net = relax_network("net", Net(), (torch.randn(32, 4),), target)
    classes = {t.name: kernel_class(t.mod, target) for t in relax_tasks(net.mod, target)}
    assert [c for n, c in classes.items() if "matmul" in n] == [TUNABLE]
    assert [c for n, c in classes.items() if "transpose" in n] == [UNTUNABLE]
