"""The operator sweep (``cdmpp.networks.sweep``): entries drawn wide, rebuilt from their
names, imported into tasks most of which are untunable."""

import math

import pytest


def test_sweep_names_are_reproducible_distinct_and_in_range():
    from cdmpp.networks import get_network
    from cdmpp.networks.sweep import FAMILY, MAX_ELEMENTS, sweep_names

    names = sweep_names(300, seed=3)
    assert names == sweep_names(300, seed=3) and names != sweep_names(300, seed=4)
    assert len(set(names)) == 300
    specs = [get_network(n) for n in names]
    assert {s.family for s in specs} == {FAMILY}
    ranks = {len(s.input_shape) for s in specs if s.input_dtype == "float32"}
    assert ranks == {2, 3, 4, 5}
    assert 10 <= sum(s.input_dtype == "int64" for s in specs) <= 70  # about one in eight is an embedding lookup
    assert all(math.prod(s.input_shape) <= MAX_ELEMENTS for s in specs)
    assert max(s.input_shape[-1] for s in specs if len(s.input_shape) == 3) > 1024  # hidden sizes drawn wide


@pytest.mark.parametrize("bad", ["sweep-", "sweep-8", "sweep-1x2x3x4x5x6", "sweep-0x8", "sweep-axb",
                                 "sweep-take-8-100x4", "sweep-4096x4096x4096"])
def test_a_malformed_sweep_name_is_refused_by_name(bad):
    from cdmpp.errors import UnknownNetworkError
    from cdmpp.networks import get_network

    with pytest.raises(UnknownNetworkError, match="sweep"):
        get_network(bad)


def test_a_sweep_entry_imports_into_many_tasks_mostly_untunable():
    from cdmpp.collect.sampling import extract_network_tasks
    from cdmpp.kernel_class import UNTUNABLE, kernel_class
    from cdmpp.networks import get_network
    from cdmpp.tvm_compat import Target

    target = Target({"kind": "llvm", "num-cores": 2})
    spec = get_network("sweep-2x4x16x32")
    outputs = spec.build()(*spec.example_inputs())
    assert len(outputs) >= 18 and outputs[0].shape == (2, 4, 16, 32)
    tasks = extract_network_tasks("sweep-2x4x16x32", target)
    classes = [kernel_class(t.mod, target) for t in tasks]
    assert len(tasks) >= 12 and classes.count(UNTUNABLE) >= len(tasks) // 2
    take = extract_network_tasks("sweep-take-2x8-100x64", target)
    assert [t.name for t in take] == ["take"] or any("take" in t.name for t in take)
