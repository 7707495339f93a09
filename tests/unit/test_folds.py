"""Leave-family-out folds and the held-out test networks' workloads in every split."""

import numpy as np
import pytest


def _manifest():
    nets = {"resnet_18-b1": ["r1", "r2", "shared"], "resnet_50-b4": ["r3"], "bert_base-b1s128": ["b1", "b2"],
            "vgg_16-b1": ["v1", "shared"], "swin_tiny-b1": ["s1"], "dlrm-b1": ["d1", "d2"], "t5_small-b1s128": ["t1"]}
    return {"tasks": [{"network": n, "task_name": k, "workload_key": k, "weight": 1} for n, ks in nets.items()
                      for k in ks]}


def test_families_fall_into_folds_that_hold_out_every_network_of_a_family():
    from cdmpp.train.folds import fold_name, fold_networks, fold_of_family, fold_table, parse_fold

    nets = {t["network"] for t in _manifest()["tasks"]}
    table = fold_table(nets, 3)
    assert sorted(f for fams in table.values() for f in fams) == sorted({"resnet", "bert", "vgg", "swin", "dlrm", "t5"})
    resnet_fold = fold_name(fold_of_family("resnet", 3), 3)
    assert {"resnet_18-b1", "resnet_50-b4"} <= set(fold_networks(nets, resnet_fold))
    assert fold_of_family("resnet", 3) == fold_of_family("resnet", 3)  # stable, not drawn
    assert parse_fold("fold-2-of-4") == (2, 4) and parse_fold("resnet_18-b1") is None
    from cdmpp.errors import InputError

    with pytest.raises(InputError, match="K >= 2"):
        parse_fold("fold-5-of-4")


def test_a_fold_split_tests_on_its_networks_and_trains_on_the_rest():
    from cdmpp.train.folds import fold_name, fold_networks, fold_of_family
    from cdmpp.train.splits import holdout_network, networks_of

    m = _manifest()
    keys = sorted({t["workload_key"] for t in m["tasks"]})
    workload = np.repeat(np.arange(len(keys)), 3)
    fold = fold_name(fold_of_family("resnet", 3), 3)
    split = holdout_network(workload, keys, m, fold, seed=0)
    members = fold_networks(set(networks_of(m)), fold)
    test_keys = set().union(*(networks_of(m)[n] for n in members))
    got = {keys[w] for w in workload[split.test]}
    assert got == test_keys and "shared" in got  # a workload of the fold is tested even where another net has it
    assert not {keys[w] for w in workload[np.concatenate([split.train, split.val])]} & test_keys
    assert split.holdout == fold


def test_the_held_out_test_networks_workloads_are_never_trained_on():
    from cdmpp.held_out import held_out_keys
    from cdmpp.train.splits import holdout_network

    banned = sorted(held_out_keys())[0]
    m = _manifest()
    m["tasks"].append({"network": "bert_base-b1s128", "task_name": "ln", "workload_key": banned, "weight": 1})
    keys = sorted({t["workload_key"] for t in m["tasks"]})
    workload = np.repeat(np.arange(len(keys)), 2)
    split = holdout_network(workload, keys, m, "dlrm-b1", seed=0)
    seen = {keys[w] for w in workload[np.concatenate([split.train, split.val])]}
    assert banned not in seen and len(seen) == len(keys) - 3  # dlrm's two workloads tested, the banned one nowhere
    split = holdout_network(workload, keys, m, "bert_base-b1s128", seed=0)
    assert banned in {keys[w] for w in workload[split.test]}  # as a test workload it is scored


def test_the_shipped_held_out_keys_are_those_of_a_fresh_extraction():
    """``cdmpp/held_out_workloads.json`` lists the LLaMA-style decoder's workloads as its
    Relax import gives them today (``cdmpp.collect.sampling.compute_held_out_file`` adds them), and
    keeps those of the import with the weights as per-call inputs (its weight transposes)."""
    import json

    from benchmarks.held_out import held_out_tasks_of
    from cdmpp.collect.store import program_hash_key
    from cdmpp.held_out import HELD_OUT_FILE
    from cdmpp.tvm_compat import Target

    shipped = json.loads(HELD_OUT_FILE.read_text())["workloads"]["llvm"]["llama_1024-b1s128"]
    fresh = {program_hash_key(t.mod) for t in held_out_tasks_of("llama_1024-b1s128", Target({"kind": "llvm"}))}
    assert fresh < set(shipped) and len(set(shipped) - fresh) == 3  # the 3 transposes of its dense layers' weights


def test_networks_folds_lists_each_folds_architectures(tmp_path, capsys):
    import json

    from cdmpp.cli import main

    dev = tmp_path / "ds" / "cpu-x"
    dev.mkdir(parents=True)
    (dev / "database_tuning_record.json").write_text("")
    (dev / "manifest.json").write_text(json.dumps(_manifest()))
    assert main(["networks", "--folds", "3", "--dataset", str(tmp_path / "ds")]) == 0
    out = capsys.readouterr().out
    assert "7 networks of the dataset, 11 workloads, in 3 leave-family-out folds" in out
    assert sum(line.startswith("fold-") for line in out.splitlines()) == 3
    assert main(["networks", "--folds", "4"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("fold-")]
    archs = [a for line in lines for a in line.split(": ")[-1].split(", ")]
    from cdmpp import networks

    assert len(lines) == 4 and sorted(archs) == sorted(networks.architectures())  # each in exactly one fold


def test_a_family_holdout_tests_on_every_network_of_the_family():
    import pytest

    from cdmpp.errors import InputError
    from cdmpp.train.folds import holdout_keys

    networks = {"sweep-8x64": {"a", "b"}, "sweep-take-1x8-100x64": {"c"}, "resnet_18-b1": {"d", "a"}}
    assert holdout_keys(networks, "family:sweep") == {"a", "b", "c"}
    with pytest.raises(InputError, match="family 'nope'"):
        holdout_keys(networks, "family:nope")


def test_the_sweep_is_in_no_fold_and_trains_with_every_fold_but_a_shared_workload():
    from cdmpp.train.folds import KERNEL_FAMILIES, fold_networks, fold_table, holdout_keys

    assert "sweep" in KERNEL_FAMILIES
    networks = {"sweep-8x64": {"a", "b"}, "sweep-take-1x8-100x64": {"c"}, "resnet_18-b1": {"d", "a"},
                "bert_base-b1s128": {"e"}}
    tables = {k: fold_table(networks, k) for k in (2, 3, 4, 5)}
    for k, table in tables.items():
        assert all("sweep" not in fams for fams in table.values())
        for i in range(1, k + 1):
            try:
                members = fold_networks(networks, f"fold-{i}-of-{k}")
            except Exception:  # a fold with none of these networks
                continue
            assert not any(n.startswith("sweep-") for n in members)
            keys = holdout_keys(networks, f"fold-{i}-of-{k}")
            # the sweep's own workloads train, unless a fold network shares one ("a")
            assert "b" not in keys and "c" not in keys
            assert ("a" in keys) == ("resnet_18-b1" in members)
