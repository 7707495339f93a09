import csv

import numpy as np

from benchmarks.table import BenchmarkConfig, format_benchmark, run_benchmark, write_benchmark
from cdmpp.model import ModelConfig
from cdmpp.train.lightning import TrainConfig


def test_benchmark_rows_files_and_table(tiny_collection, tmp_path):
    cfg, _ = tiny_collection
    bench = BenchmarkConfig(
        holdouts=[],
        model=ModelConfig(d_model=16, n_heads=2, n_layers=1, ff_dim=32),
        train=TrainConfig(epochs=1, batch_size=4),
        mlp_epochs=1,
        log_dir=tmp_path / "logs",
    )
    rows = run_benchmark(cfg.out_dir, bench)
    models = [r["model"] for r in rows]
    assert models == [
        "cdmpp transformer",
        "without positional enc.",
        "xgboost PerStoreFeature",
        "segment-sum MLP",
        "FLOPs / best throughput",
    ]
    assert {r["split"] for r in rows} == {"random by program"}
    # every model is scored on the same test programs, and each row is a real score
    assert len({r["programs"] for r in rows}) == 1 and rows[0]["programs"] >= 1
    for r in rows:
        assert r["train_s"] >= 0 and r["predict_programs_per_s"] > 0
        assert 0 < r["mape"] < 100 and 0 <= r["within_10"] <= r["within_25"] <= 1 and r["rmse_log"] > 0
        assert 0 <= r["top1"] <= r["top5"] <= 1
        # a task of one test program has no pair to rank: tau is undefined, not 0
        assert (-1 <= r["kendall_tau"] <= 1) if r["programs"] > 1 else r["kendall_tau"] != r["kendall_tau"]
    csv_path, md_path = write_benchmark(rows, tmp_path / "out")
    with open(csv_path, encoding="utf-8") as f:
        assert [r["model"] for r in csv.DictReader(f)] == models
    assert md_path.read_text().startswith("| split | model |")
    assert "segment-sum MLP" in format_benchmark(rows)

def test_access_ablation_input_keeps_only_the_walks_own_columns(tiny_featurized):
    """The ablation's input: the walk's own columns stay, the buffer-access columns go."""

    from benchmarks.table import own_features_only
    from cdmpp.featurize.ast import OWN_FEATURES

    _, data = tiny_featurized
    own = len(OWN_FEATURES)
    bare = own_features_only(data)
    np.testing.assert_array_equal(bare.x[:, :own], data.x[:, :own])
    assert not bare.x[:, own:].any() and data.x[:, own:].any()  # a copy: data is untouched
