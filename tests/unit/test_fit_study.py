"""The fit study saves every finished lever and resumes from its output file."""

import argparse
import json

import numpy as np
import pytest

from benchmarks import fit_study
from cdmpp.errors import InputError


def _args(dataset, out, levers, seed=0, fresh=False):
    parser = argparse.ArgumentParser()
    fit_study.add_arguments(parser)
    argv = ["-d", str(dataset), "--levers", *levers, "--epochs", "1", "--no-trees", "--seed", str(seed),
            "--cache", str(out.parent / "cache"), "-o", str(out)]
    return parser.parse_args(argv + (["--fresh"] if fresh else []))


def test_a_study_resumes_from_its_output_and_keeps_finished_levers(two_device_dataset, tmp_path, monkeypatch):
    out = tmp_path / "study.json"
    assert fit_study.main(_args(two_device_dataset, out, ["huber"])) == 0
    first = json.loads(out.read_text())
    assert [(r["lever"], r["part"]) for r in first["rows"]] == [("huber", "fit"), ("huber", "validation")]
    assert out.with_suffix(".md").exists()

    said = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: said.append(" ".join(map(str, a))))
    monkeypatch.chdir(two_device_dataset.parent)  # the same folders, by a relative path
    assert fit_study.main(_args(two_device_dataset.relative_to(two_device_dataset.parent), out,
                                ["huber", "current"])) == 0
    second = json.loads(out.read_text())
    levers = [r["lever"] for r in second["rows"]]
    assert levers == ["huber", "huber", "current", "current"]
    # the finished lever is kept as it was (its training seconds too), not trained again
    assert second["rows"][:2] == first["rows"]
    assert any("resuming: huber already scored" in line for line in said)


def test_a_study_refuses_to_resume_onto_another_split(two_device_dataset, tmp_path):
    out = tmp_path / "study.json"
    assert fit_study.main(_args(two_device_dataset, out, ["huber"])) == 0
    with pytest.raises(InputError, match="another split"):
        fit_study.main(_args(two_device_dataset, out, ["huber"], seed=1))
    # --fresh starts again and replaces the file
    assert fit_study.main(_args(two_device_dataset, out, ["current"], seed=1, fresh=True)) == 0
    assert {r["lever"] for r in json.loads(out.read_text())["rows"]} == {"current"}


def _with_tuned_phase(src, dst):
    """A copy of ``src`` whose first device folder marks each task's last program as measured by
    a tuned phase (``tuned_from`` in its manifest entry), as `cdmpp collect --tuned-tasks` does."""
    import shutil

    from cdmpp import dataset as ds

    shutil.copytree(src, dst)
    folder = sorted(p for p in dst.iterdir() if p.is_dir())[0]
    m = ds.read_manifest(folder)
    db = ds.load_device_dir(folder)
    counts = {}
    for p in db.programs:
        key = db.workload_keys[p.workload_index]
        counts[key] = counts.get(key, 0) + 1
    marked = 0
    for t in m["tasks"]:
        n = counts.get(t["workload_key"], 0)
        if n >= 4 and "tuned_from" not in t and not any(u.get("tuned_from") for u in m["tasks"]
                                                         if u["workload_key"] == t["workload_key"]):
            t["tuned_from"] = n - 1
            marked += 1
    ds.write_json_atomic(folder / ds.MANIFEST_FILE, m)
    return marked


def test_tuned_phase_programs_are_found_by_their_rank_in_the_task(two_device_dataset, tmp_path):
    from cdmpp.train.devices import load_corpus, tuned_phase

    marked = _with_tuned_phase(two_device_dataset, tmp_path / "data")
    corpus = load_corpus(tmp_path / "data", tmp_path / "cache", progress=False)
    mask = tuned_phase(corpus)
    assert marked > 0 and mask.sum() == marked  # one per marked task: its last record
    first = corpus.data.device_row == 1
    assert not mask[~first].any()
    for key in np.unique(corpus.raw_keys[mask]):  # the last program of its task on that device
        rows = np.flatnonzero(first & (corpus.raw_keys == key))
        assert mask[rows].tolist() == [False] * (len(rows) - 1) + [True]
    # the device folder's card counts them
    from cdmpp.card import card

    folder = corpus.folders[corpus.devices[0].device_id]
    assert f"Tuned phase (the fast-end policy, `sampling.tuned_policy`): {marked} programs of {marked} tasks" in \
        card(folder)


def test_tuned_data_against_as_many_random_programs(two_device_dataset, tmp_path):
    """The fast-end data's validation check: the tuned lever trains on the thinned random
    programs plus every tuned one, the control on as many more random ones; tuned programs of
    validation workloads are a part of their own."""
    marked = _with_tuned_phase(two_device_dataset, tmp_path / "data")
    out = tmp_path / "study.json"
    parser = argparse.ArgumentParser()
    fit_study.add_arguments(parser)
    args = parser.parse_args(["-d", str(tmp_path / "data"), "--levers", "huber-trace", "huber-trace-tuned",
                              "huber-trace-random", "--epochs", "1", "--no-trees", "--train-share", "0.25",
                              "--cache", str(tmp_path / "cache"), "-o", str(out)])
    assert fit_study.main(args) == 0
    result = json.loads(out.read_text())
    split = result["split"]
    assert split["tuned_train"] + split["tuned_validation"] == marked and split["tuned_train"] > 0
    fit = {r["lever"]: r["train_programs"] for r in result["rows"] if r["part"] == "fit"}
    assert fit["huber-trace-tuned"] == fit["huber-trace-random"] == fit["huber-trace"] + split["tuned_train"]
    parts = {r["part"] for r in result["rows"]}
    assert parts == {"fit", "validation"} | ({"validation-tuned"} if split["tuned_validation"] else set())


def test_tuned_levers_need_tuned_programs(two_device_dataset, tmp_path):
    with pytest.raises(InputError, match="tuned-phase programs"):
        fit_study.main(_args(two_device_dataset, tmp_path / "s.json", ["huber-trace-tuned"]))


def test_a_folder_that_gained_tuned_programs_keeps_its_study():
    """Tuned-phase programs train only the levers that ask for them: the other levers' split is
    unchanged, so a study resumes; another split does not."""
    config = {"levers": ["huber"], "epochs": 8, "seed": 0, "datasets": ["a"], "devices": ["d"]}
    before = {"config": config, "split": {"train": 10, "validation": 3}}
    after = {"config": {**config, "levers": ["huber-trace-tuned"], "datasets": ["b"]},
             "split": {"train": 10, "validation": 3, "tuned_train": 5, "tuned_validation": 1}}
    assert fit_study.same_study(before, after)
    assert not fit_study.same_study(before, {**after, "split": {**after["split"], "validation": 4}})
    assert not fit_study.same_study(before, {**after, "config": {**after["config"], "seed": 1}})


def test_a_study_with_a_fold_scores_the_held_out_families_as_a_part_of_their_own(two_device_dataset, tmp_path):
    from cdmpp.train.folds import fold_name, fold_of_family

    fold = fold_name(fold_of_family("dcgan", 2), 2)
    out = tmp_path / "study.json"
    args = _args(two_device_dataset, out, ["huber"])
    args.fold = fold
    assert fit_study.main(args) == 0
    result = json.loads(out.read_text())
    parts = [r["part"] for r in result["rows"]]
    assert parts == ["fit", "validation", "fold"] and result["split"]["fold"] > 0
    fold_row = result["rows"][2]
    assert fold_row["programs"] == result["split"]["fold"] and np.isfinite(fold_row["slow_half_log_ratio"])
    assert "slowest 50% log p/m" in out.with_suffix(".md").read_text()
    with pytest.raises(InputError, match="fold-1-of-4"):
        fit_study.StudyConfig([two_device_dataset], fold="dcgan")


def test_every_lever_makes_a_model_and_a_recipe():
    """Each lever of the study (the fast-end ones on the shipped recipe among them) gives a
    valid model and training config, and a model of that config predicts a batch."""
    import dataclasses

    import torch

    from benchmarks.fit_study import StudyConfig, lever_configs
    from benchmarks.levers import LEVERS
    from cdmpp.featurize import FEATURE_DIM
    from cdmpp.featurize.loops import LOOP_DIM
    from cdmpp.featurize.trace import TRACE_DIM
    from cdmpp.model import LatencyTransformer

    cfg = StudyConfig(datasets=[], levers=list(LEVERS), d_model=16, n_layers=1, ff_dim=32)
    for name, lever in LEVERS.items():
        model, train = lever_configs(cfg, lever, 2)
        model = dataclasses.replace(model, feature_dim=FEATURE_DIM + LOOP_DIM + 1 + TRACE_DIM + 1)  # as fit sets it
        if lever.model.get("roofline") or lever.train.get("listmle_weight"):
            assert model.loop_tokens and model.pooling == "lse" and train.huber_delta == 0.1, name
        m = LatencyTransformer(model).eval()
        x = torch.zeros(2, 3, model.feature_dim)
        x[..., 0] = 1.0
        with torch.no_grad():
            out = m.predict_log_latency(x, torch.arange(3).expand(2, 3), torch.ones(2, 3, dtype=torch.bool),
                                        torch.tensor([1, 2]))
        assert out.shape == (2,) and torch.all(torch.isfinite(out)), name


def test_the_sweep_levers_drop_the_sweeps_own_workloads_or_its_tunable_ones():
    import numpy as np

    from benchmarks.levers import LEVERS
    from cdmpp.errors import InputError
    from cdmpp.train.splits import Split, drop_sweep_workloads

    networks = {"sweep-8x64": {"shared", "sweep-only", "sweep-one"}, "resnet_18-b1": {"shared", "zoo-only"}}
    raw = np.array(["shared", "sweep-only", "zoo-only", "sweep-one", "shared", "sweep-only"])
    workload = np.array([0, 1, 2, 3, 0, 1])  # the sweep's task 1 has two programs (tunable), task 3 one
    split = Split(np.arange(6), np.array([7]), np.array([8]), "fold-3-of-4")
    assert drop_sweep_workloads(split, networks, raw, workload, "all") is split
    out = drop_sweep_workloads(split, networks, raw, workload, "none")
    assert out.train.tolist() == [0, 2, 4] and out.val.tolist() == [7] and out.test.tolist() == [8]
    assert drop_sweep_workloads(split, networks, raw, workload, "untunable").train.tolist() == [0, 2, 3, 4]
    with pytest.raises(InputError, match="keep must be"):
        drop_sweep_workloads(split, networks, raw, workload, "some")
    with pytest.raises(InputError, match="no training program"):
        drop_sweep_workloads(Split(np.array([1, 5]), split.val, split.test, "x"), networks, raw, workload, "none")
    assert LEVERS["shipped-without-sweep"].train["sweep_workloads"] == "none"
    assert LEVERS["shipped-sweep-untunable"].train["sweep_workloads"] == "untunable"
    assert "sweep_workloads" not in LEVERS["shipped-tuned-listmle-fast-x1"].train


def test_the_sweep_workloads_reach_the_recipe_and_its_words():
    from cdmpp.cli import build_parser
    from cdmpp.recipe_args import model_configs
    from cdmpp.train.config import TrainConfig, describe_loss

    _, train = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y", "--sweep-workloads", "untunable"]))
    assert train.sweep_workloads == "untunable"
    _, default = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y"]))
    assert default.sweep_workloads == "all"
    assert "untunable train" in describe_loss({"huber_delta": 0.1, "sweep_workloads": "untunable"})
    assert "sweep" not in describe_loss({"huber_delta": 0.1, "sweep_workloads": "all"})
    with pytest.raises(InputError, match="sweep_workloads must be one of all, untunable, none, got 'some'"):
        TrainConfig(sweep_workloads="some")


def test_the_sweep_weight_scales_the_sweeps_own_programs_in_the_level_loss():
    import numpy as np

    from benchmarks.levers import LEVERS
    from cdmpp.errors import InputError
    from cdmpp.train.config import TrainConfig, describe_loss
    from cdmpp.train.fit import level_weights
    from cdmpp.train.splits import sweep_own_programs

    networks = {"sweep-8x64": {"shared", "sweep-only", "sweep-one"}, "resnet_18-b1": {"shared", "zoo-only"}}
    raw = np.array(["shared", "sweep-only", "zoo-only", "sweep-one", "shared", "sweep-only"])
    sweep = sweep_own_programs(networks, raw)
    assert sweep.tolist() == [False, True, False, True, False, True]  # a workload a zoo network shares is the zoo's

    class Programs:  # the two fields level_weights reads
        workload = np.array([0, 1, 2, 3, 0, 1])
        latency = np.array([1.0, 2.0, 3.0, 4.0, 2.0, 1.0])

    train = np.arange(6)
    assert level_weights(Programs, train, TrainConfig()) is None  # every program alike
    w = level_weights(Programs, train, TrainConfig(sweep_weight=0.25), sweep)
    assert w.tolist() == [1.0, 0.25, 1.0, 0.25, 1.0, 0.25]
    # with the fast end weighted: task 0's and task 1's fastest program (index 0 and 5) count twice
    fast = level_weights(Programs, train, TrainConfig(fast_weight=1.0, sweep_weight=0.25), sweep)
    assert fast.tolist() == [2.0, 0.25, 2.0, 0.5, 1.0, 0.5]
    with pytest.raises(InputError, match="mask of the operator sweep"):
        level_weights(Programs, train, TrainConfig(sweep_weight=0.25))
    with pytest.raises(InputError, match="sweep_weight must be > 0"):
        TrainConfig(sweep_weight=0.0)
    assert "weighted 0.25 in the level loss" in describe_loss({"huber_delta": 0.1, "sweep_weight": 0.25})
    assert "weighted" not in describe_loss({"huber_delta": 0.1, "sweep_weight": 1.0})
    assert LEVERS["shipped-sweep-weight-0.25"].train["sweep_weight"] == 0.25


def test_the_sweep_weight_reaches_the_recipe_and_needs_the_corpus_protocol(tmp_path):
    from cdmpp.cli import build_parser
    from cdmpp.errors import InputError
    from cdmpp.recipe_args import model_configs
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    _, cfg = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y", "--sweep-weight", "0.5"]))
    assert cfg.sweep_weight == 0.5
    _, default = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y"]))
    assert default.sweep_weight == 1.0
    folder = tmp_path / "cpu-x"
    folder.mkdir()
    (folder / "database_tuning_record.json").write_text("")
    with pytest.raises(InputError, match="several device folders"):
        train(TrainData([folder]), tmp_path / "out", train_config=TrainConfig(sweep_weight=0.5))
