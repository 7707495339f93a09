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


def _dims(name):
    return tuple(int(d) for d in name.split("-")[1].split("x"))


def test_the_second_pass_draws_new_shapes_near_the_worst_placed_entries_only():
    from cdmpp.networks import get_network
    from cdmpp.networks.sweep import refine_names

    worst, bad, fine = "sweep-4x128x768", "sweep-4x12x64x64", "sweep-1x4096"
    errors = {worst: 1.2, bad: 0.5, fine: 0.1}  # |log p/m|: 3.3x, 1.65x, 1.1x
    names = refine_names(errors, 8, seed=0, known={"sweep-4x128x784"}, per_entry=4)
    assert names == refine_names(errors, 8, seed=0, known={"sweep-4x128x784"}, per_entry=4)
    assert len(names) == len(set(names)) == 8
    assert not set(names) & {*errors, "sweep-4x128x784"}
    for n in names:
        get_network(n)  # every new entry is a valid sweep entry
    near = {n: min((s for s in (worst, bad) if len(_dims(s)) == len(_dims(n))),
                   key=lambda s: sum(abs(math.log(a / b)) for a, b in zip(_dims(s), _dims(n)))) for n in names}
    assert sorted(near.values()).count(worst) == 4 and sorted(near.values()).count(bad) == 4
    for n, src in near.items():  # each dimension within 1/2 to 2 of its source's (one rounding step more)
        assert all(b / 2 - 16 <= a <= 2 * b + 16 for a, b in zip(_dims(n), _dims(src)))
        assert _dims(n)[-1] % 16 == 0 if _dims(src)[-1] % 16 == 0 else True
    # only entries beyond 1.25x are refined: the 1.1x one never is, and none beyond gives none
    assert refine_names({fine: 0.1}, 5) == []
    assert len(refine_names(errors, 2, per_entry=4)) == 2  # the worst entry alone


def test_the_second_pass_refuses_a_name_that_is_not_a_sweep_entry():
    from cdmpp.errors import UnknownNetworkError
    from cdmpp.networks.sweep import refine_names

    with pytest.raises(ValueError, match="resnet_18-b1"):
        refine_names({"resnet_18-b1": 1.0}, 4)
    with pytest.raises(UnknownNetworkError, match="sweep-0x8"):
        refine_names({"sweep-0x8": 1.0}, 4)
    with pytest.raises(ValueError, match="count"):
        refine_names({"sweep-8x64": 1.0}, 0)


def test_a_plan_s_networks_reach_the_manifest_with_how_they_were_chosen(tmp_path):
    import json

    from cdmpp.card import _sweep_lines
    from cdmpp.collect.config import CollectConfig
    from cdmpp.collect.store import build_manifest
    from cdmpp.device import DeviceDescriptor
    from cdmpp.errors import DatasetError
    from cdmpp.schema import parse_plan
    from cdmpp.tasks import Task

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"networks": ["sweep-8x64"], "chosen_by": "second pass, near the worst"}))
    p = parse_plan(plan)
    cfg = CollectConfig(networks=["sweep-4x64", *p.networks], out_dir=tmp_path,
                        network_notes=dict.fromkeys(p.networks, p.chosen_by))
    tasks = [Task("softmax", 1, None, network=n, workload_key=f"k{i}") for i, n in enumerate(cfg.networks)]
    device = DeviceDescriptor.from_json({"device_id": "cpu-test", "kind": "cpu", "model": "test", "cores": 2, "isa": "avx2"})
    m = build_manifest(device, cfg, {}, tasks)
    assert m["networks"]["sweep-8x64"]["chosen_by"] == "second pass, near the worst"
    assert "chosen_by" not in m["networks"]["sweep-4x64"]
    again = build_manifest(device, CollectConfig(networks=["sweep-8x64"], out_dir=tmp_path), m, tasks[1:])
    assert again["networks"]["sweep-8x64"]["chosen_by"] == "second pass, near the worst"  # a resumed run keeps it
    lines = "\n".join(_sweep_lines(m))
    assert "2 entries" in lines and "1: second pass, near the worst" in lines and "1: drawn at random" in lines
    plan.write_text(json.dumps({"networks": ["sweep-8x64"]}))
    with pytest.raises(DatasetError, match="chosen_by"):
        parse_plan(plan)
