import json

import numpy as np
import pytest

from cdmpp.serve.tune_benchmark import (
    TuneBenchmarkConfig,
    _trials,
    best_so_far,
    choose_tasks,
    format_tune_benchmark,
    reach_table,
    trials_to_reach,
    tuning_curves,
)


def test_best_so_far_counts_failed_trials_and_keeps_the_minimum():
    curve = best_so_far([None, [3.0, 5.0, 4.0], [9.0], None, [1.0, 2.0]])
    assert curve.tolist() == [np.inf, 4.0, 4.0, 4.0, 1.5]
    assert best_so_far([]).shape == (0,)


def test_trials_read_tuning_records_in_order_with_failures(tmp_path):
    lines = [[0, ["trace", [2e-6, 4e-6], {}, []]], [0, ["trace", [1e10], {}, []]], [0, ["trace", [1e-6], {}, []]]]
    (tmp_path / "database_tuning_record.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert _trials(tmp_path) == [[2e-6, 4e-6], None, [1e-6]]
    assert _trials(tmp_path / "missing") == []


def test_config_and_task_choice_errors(tiny_featurized):
    db, _ = tiny_featurized
    with pytest.raises(ValueError, match="unknown cost models"):
        TuneBenchmarkConfig(network="dcgan-b1", cost_models=("xgb", "ansor"))
    with pytest.raises(ValueError, match=">= 1"):
        TuneBenchmarkConfig(network="dcgan-b1", trials=0)
    with pytest.raises(ValueError, match="not in this dataset"):
        choose_tasks(db, "gpt2-b1", 2)
    chosen = choose_tasks(db, "dcgan-b1", 1)
    assert len(chosen) == 1 and chosen[0][1] >= 1


def test_plugin_runs_inside_metaschedule_tuning(tiny_collection, tmp_path, capsys):
    """Two real trials of MetaSchedule's tuner with the cdmpp cost model, then a resumed call."""
    from cdmpp.cli import main

    _, summary = tiny_collection
    args = ["tune-benchmark", "-d", str(summary.device_dir), "--network", "dcgan-b1", "--tasks", "1"]
    args += ["--trials", "2", "--trials-per-iter", "2", "--cost-models", "cdmpp", "--output", str(tmp_path)]
    assert main(args + ["--plot", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    rows = (tmp_path / "tune_benchmark.csv").read_text().splitlines()
    assert len(rows) == 2 and ",cdmpp,2," in rows[1]
    best = float(rows[1].split(",")[-2])
    assert 0 < best < 1.0  # a real measured latency in seconds
    assert "cdmpp" in out
    # finished runs are read back, not tuned again
    assert main(args) == 0
    assert "tuning " not in capsys.readouterr().out
    assert (tmp_path / "tune_benchmark.md").read_text().startswith("| task |")
    assert format_tune_benchmark([]) == "(no rows)"
    curves = tuning_curves(tmp_path)
    ((panel, models),) = curves.items()
    assert panel.startswith("fused_") and list(models) == ["cdmpp"] and models["cdmpp"][0].shape == (2,)
    assert "cdmpp" in reach_table(curves)


def test_trials_to_reach():
    curve = best_so_far([[5.0], None, [3.0], [2.0]])
    assert trials_to_reach(curve, 3.0) == 3 and trials_to_reach(curve, 1.0) is None
