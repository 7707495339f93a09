"""The fast-end measures of the evaluation tables (``cdmpp.train.metrics.fast_end``)."""

import numpy as np
import pytest

from cdmpp.train.metrics import fast_end, summary


def _two_tasks():
    rng = np.random.default_rng(3)
    true = np.exp(rng.normal(-8, 0.7, size=40))
    groups = np.repeat([5, 9], 20)
    return true, groups


def test_perfect_prediction_scores_one():
    true, groups = _two_tasks()
    out = fast_end(true, true, groups)
    assert out["tasks"] == 2
    assert out["best_ratio"] == pytest.approx(1.0)
    assert out["decile_log_ratio"] == pytest.approx(0.0)
    assert out["slope"] == pytest.approx(1.0)
    assert out["best_speed"] == pytest.approx(1.0)


def test_shrunk_prediction_has_the_shrink_as_slope_and_overpredicts_the_fastest():
    true, groups = _two_tasks()
    lt = np.log(true)
    pred = lt.copy()
    for g in np.unique(groups):
        sel = groups == g
        pred[sel] = lt[sel].mean() + 0.4 * (lt[sel] - lt[sel].mean())
    out = fast_end(np.exp(pred), true, groups)
    assert out["slope"] == pytest.approx(0.4)
    expect = [np.exp(0.6 * (lt[groups == g].mean() - lt[groups == g].min())) for g in (5, 9)]
    assert out["best_ratio"] == pytest.approx(np.median(expect))
    assert out["best_ratio"] > 1.2
    assert out["best_speed"] == pytest.approx(1.0)  # a monotone shrink keeps the order


def test_level_only_prediction_has_slope_zero_and_picks_the_first_program():
    true, groups = _two_tasks()
    pred = np.ones_like(true)
    out = fast_end(pred, true, groups)
    assert out["slope"] == pytest.approx(0.0)
    first = [true[groups == g][0] for g in (5, 9)]
    best = [true[groups == g].min() for g in (5, 9)]
    assert out["best_speed"] == pytest.approx(np.mean(np.divide(best, first)))


def test_single_program_tasks_are_skipped_and_summary_carries_the_columns():
    true = np.array([1e-3, 2e-3, 4e-3, 5e-3])
    groups = np.array([0, 1, 1, 2])
    pred = np.array([1e-3, 4e-3, 2e-3, 5e-3])  # task 1 predicted in reverse
    out = fast_end(pred, true, groups)
    assert out["tasks"] == 1
    assert out["best_ratio"] == pytest.approx(2.0)
    assert out["slope"] == pytest.approx(-1.0)
    assert out["best_speed"] == pytest.approx(0.5)
    row = summary(pred, true, groups)
    assert row["best_ratio"] == pytest.approx(2.0) and row["best_speed"] == pytest.approx(0.5)
    assert row["median_ape"] == pytest.approx(np.median([0, 1, 0.5, 0]))


def test_no_task_with_two_programs_gives_nan():
    out = fast_end(np.array([1.0, 2.0]), np.array([1.0, 2.0]), np.array([0, 1]))
    assert out["tasks"] == 0 and np.isnan(out["best_ratio"]) and np.isnan(out["slope"])


def test_the_tuned_regime_columns_look_only_at_each_tasks_fast_end():
    """A model right on the slow half and reversed on the fast half: the whole task's tau is
    high, but tau over the fastest half is -1, and among the 8 fastest it picks the slowest."""
    from scipy.stats import kendalltau

    true = np.arange(1, 21, dtype=np.float64) * 1e-4  # one task, 20 programs, fastest first
    groups = np.zeros(20, dtype=np.int64)
    pred = true.copy()
    pred[:10] = true[:10][::-1]  # the fastest half predicted in reverse order
    out = fast_end(pred, true, groups)
    assert out["tau_fast_half"] == pytest.approx(-1.0)
    assert kendalltau(pred, true).statistic > 0.4  # the whole task still ranks well
    # among the 8 fastest the model picks its lowest prediction: program 7 (predicted 3e-4), measured 8e-4
    assert out["top1_of_8"] == pytest.approx(1e-4 / 8e-4)
    assert out["best_speed"] == pytest.approx(1e-4 / 10e-4)  # over the whole task it picks program 9
    assert fast_end(true, true, groups)["tau_fast_half"] == pytest.approx(1.0)
    assert fast_end(true, true, groups)["top1_of_8"] == pytest.approx(1.0)
    row = summary(pred, true, groups)
    assert row["tau_fast_half"] == pytest.approx(-1.0) and "top1_of_8" in row


def test_a_model_that_predicts_each_tasks_median_scores_slope_zero_and_the_true_fast_end_bias():
    """The shrinkage columns: predicting every program at its task's median latency places
    each task's level and nothing within it, so the slope is 0, the fastest tenth's mean
    log(predicted / measured) is that of the median over those programs (above 0), and
    the slowest half's is below 0."""
    from cdmpp.train.plots import level_free

    true, groups = _two_tasks()
    med = {g: np.median(true[groups == g]) for g in np.unique(groups)}
    pred = np.array([med[g] for g in groups])
    out = fast_end(pred, true, groups)
    fast, slow = [], []
    for g in np.unique(groups):
        t = np.sort(true[groups == g])
        fast.append(np.mean(np.log(med[g] / t[: t.size // 10])))
        slow.append(np.mean(np.log(med[g] / t[t.size // 2:])))
    assert out["slope"] == pytest.approx(0.0, abs=1e-12)
    assert out["decile_log_ratio"] == pytest.approx(np.median(fast)) and out["decile_log_ratio"] > 0.3
    assert out["slow_half_log_ratio"] == pytest.approx(np.median(slow)) and out["slow_half_log_ratio"] < -0.1
    perfect = fast_end(true, true, groups)
    assert perfect["slow_half_log_ratio"] == pytest.approx(0.0) and perfect["slope"] == pytest.approx(1.0)
    x, y = level_free(pred, true, groups)
    assert np.allclose(y, 0.0) and np.all(np.isfinite(x)) and np.ptp(x) > 1.0
    x2, y2 = level_free(true * 3.0, true, groups)  # a constant factor is a level: gone
    assert np.allclose(x2, y2)


def test_the_level_free_plot_is_written(tmp_path):
    from cdmpp.train.plots import plot_level_free

    true, groups = _two_tasks()
    path = plot_level_free({"dev": (true * 1.2, true, groups)}, "t", tmp_path / "lf.png")
    assert path.stat().st_size > 5000 and path.read_bytes()[:4] == b"\x89PNG"


def test_a_written_table_names_the_checkpoint_on_its_first_line(tmp_path):
    """``cdmpp evaluate --output`` and the benches write the table beside the rows, its first
    line naming the checkpoint by folder and weights hash: two checkpoints, two lines."""
    import hashlib
    import json
    import shutil

    from cdmpp.predictor import DEFAULT_CHECKPOINT
    from cdmpp.train.report import checkpoint_line, write_rows

    rows = {"cdmpp transformer": {"mape": 0.25}}
    write_rows(rows, tmp_path / "out" / "rows.json", "| table |", None)
    assert json.loads((tmp_path / "out" / "rows.json").read_text()) == rows
    first, blank, table = (tmp_path / "out" / "rows.md").read_text().splitlines()
    digest = hashlib.sha256((DEFAULT_CHECKPOINT / "model.safetensors").read_bytes()).hexdigest()[:12]
    assert first.startswith("Checkpoint: ") and digest in first and blank == "" and table == "| table |"
    other = tmp_path / "other"
    shutil.copytree(DEFAULT_CHECKPOINT, other)
    with open(other / "model.safetensors", "ab") as f:
        f.write(b"\0")
    assert digest not in checkpoint_line(other) and "other" in checkpoint_line(other)


def test_the_summary_splits_task_levels_by_kernel_class_and_exposes_a_model_wrong_on_untunable_tasks():
    """A model exact on every task with several programs and 2x slow on each task with one
    program (an untunable one): the pooled MAPE is small, the untunable class is not placed."""
    import numpy as np

    from cdmpp.train.metrics import summary
    from cdmpp.train.report import format_table

    true = np.array([1e-3, 2e-3, 3e-3, 1e-3, 4e-3, 5e-5, 7e-5, 9e-5])
    groups = np.array([0, 0, 0, 1, 1, 2, 3, 4])
    pred = true.copy()
    pred[groups >= 2] *= 2.0
    row = summary(pred, true, groups)
    assert row["untunable_tasks"] == 3 and row["untunable_within"] == 0.0 and row["tunable_within"] == 1.0
    assert abs(row["untunable_level"] - np.log(2.0)) < 1e-12 and abs(row["tunable_level"]) < 1e-12
    table = format_table({"m": row}, "t")
    assert "1-prog lvl" in table and "+0.69" in table and "0.0%" in table and "100.0%" in table
