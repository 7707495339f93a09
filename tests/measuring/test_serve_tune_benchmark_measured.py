import pytest

from benchmarks.tune import (
    TuneBenchmarkConfig,
    choose_tasks,
    format_tune_benchmark,
    reach_table,
    tuning_curves,
)


def test_config_and_task_choice_errors(tiny_featurized):
    db, _ = tiny_featurized
    with pytest.raises(ValueError, match="unknown cost models"):
        TuneBenchmarkConfig(network="dcgan-b1", cost_models=("xgb", "ansor"))
    with pytest.raises(ValueError, match=">= 1"):
        TuneBenchmarkConfig(network="dcgan-b1", trials=0)
    with pytest.raises(ValueError, match="not in this dataset"):
        choose_tasks(db, "gpt2-b1", 2)
    chosen = choose_tasks(db, "dcgan-b1", 1)
    assert len(chosen) == 1 and chosen[0].weight >= 1 and chosen[0].rank == 0
    every = choose_tasks(db, "dcgan-b1", 99)
    if len(every) > 1:  # a task picked by its name prefix keeps its rank in the weight x FLOPs order
        name = every[1].name
        prefix = name.split("_subtract")[0] if "_subtract" in name else name
        picked = choose_tasks(db, "dcgan-b1", 0, (prefix,))
        assert [(p.name, p.rank) for p in picked] == [(name, 1)]
        assert [p.name for p in choose_tasks(db, "dcgan-b1", 1, (prefix,))] == [every[0].name, name]
    with pytest.raises(ValueError, match="no task named conv99"):
        choose_tasks(db, "dcgan-b1", 1, ("conv99",))
    with pytest.raises(ValueError, match="<network>:<task>"):
        TuneBenchmarkConfig(network="dcgan-b1", task_names=("fused_conv2d7",))
    cfg = TuneBenchmarkConfig(network="dcgan-b1", task_names=("mobilenet_v2-b1:fused_conv2d7",))
    assert cfg.networks == ["dcgan-b1", "mobilenet_v2-b1"] and cfg.names_for("mobilenet_v2-b1") == ("fused_conv2d7",)
    cfg = TuneBenchmarkConfig(network="dcgan-b1", trials=64, model_trials=("xgb=512",))
    assert cfg.trials_for("xgb") == 512 and cfg.trials_for("cdmpp") == 64
    for bad in ("xgb:512", "ansor=512", "xgb=0", "xgb=many"):
        with pytest.raises(ValueError, match="<cost model>=<trials"):
            TuneBenchmarkConfig(network="dcgan-b1", model_trials=(bad,))

def test_plugin_runs_inside_metaschedule_tuning(tiny_collection, tmp_path, capsys):
    """Two real trials of MetaSchedule's tuner with the cdmpp cost model, then a resumed call."""
    from cdmpp.cli import main

    _, summary = tiny_collection
    args = ["bench", "tune", "-d", str(summary.device_dir), "--network", "dcgan-b1", "--tasks", "1"]
    args += ["--trials", "2", "--trials-per-iter", "2", "--cost-models", "cdmpp", "--output", str(tmp_path)]
    assert main(args + ["--plot", str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    rows = (tmp_path / "tune_benchmark.csv").read_text().splitlines()
    assert len(rows) == 2 and ",cdmpp,2," in rows[1]
    best = float(rows[1].split(",")[-2])
    assert 0 < best < 1.0  # a real measured latency in seconds
    assert "cdmpp" in out
    # finished runs are read back, not tuned again, also from their gzipped copies alone
    for plain in tmp_path.rglob("database_*.json"):
        assert plain.with_name(plain.name + ".gz").exists()
        plain.unlink()
    assert main(args) == 0
    assert "tuning " not in capsys.readouterr().out
    md = (tmp_path / "tune_benchmark.md").read_text().split("\n\n")
    assert md[0].startswith("Checkpoint: `") and md[1].startswith("| task |")  # the plugin's checkpoint, then the table
    assert format_tune_benchmark([]) == "(no rows)"
    curves = tuning_curves(tmp_path)
    ((panel, models),) = curves.items()
    assert panel.startswith("fused_") and list(models) == ["cdmpp"] and models["cdmpp"][0].shape == (2,)
    assert "cdmpp" in reach_table(curves)
