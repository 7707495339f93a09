import json

import numpy as np
import pytest

from benchmarks.tune import (
    best_so_far,
    reach_table,
    run_trials,
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
    assert run_trials(tmp_path) == [[2e-6, 4e-6], None, [1e-6]]
    assert run_trials(tmp_path / "missing") == []
    # a finished run kept only gzipped (as in git) reads the same
    from cdmpp import dataset as ds

    ds.pack(tmp_path)
    (tmp_path / "database_tuning_record.json").unlink()
    assert run_trials(tmp_path) == [[2e-6, 4e-6], None, [1e-6]]

def test_trials_to_reach():
    curve = best_so_far([[5.0], None, [3.0], [2.0]])
    assert trials_to_reach(curve, 3.0) == 3 and trials_to_reach(curve, 1.0) is None

def test_network_curve_sums_weighted_task_bests_in_trial_order(tmp_path):
    from benchmarks.tune_network import network_curve

    wl = [["111", "a"], ["222", "b"]]
    recs = [[0, ["t", [4e-3], {}, []]], [0, ["t", [1e10], {}, []]], [1, ["t", [1e-3, 3e-3], {}, []]],
            [0, ["t", [1e-3], {}, []]], [1, ["t", [5e-3], {}, []]]]
    (tmp_path / "database_workload.json").write_text("".join(json.dumps(x) + "\n" for x in wl))
    (tmp_path / "database_tuning_record.json").write_text("".join(json.dumps(x) + "\n" for x in recs))
    curve = network_curve(tmp_path, {"111": 2.0, "222": 3.0})
    assert curve[:2].tolist() == [np.inf, np.inf]  # task 222 has no trial yet
    assert np.allclose(curve[2:], [2 * 4e-3 + 3 * 2e-3, 2 * 1e-3 + 3 * 2e-3, 2 * 1e-3 + 3 * 2e-3])
    assert network_curve(tmp_path / "missing", {"111": 1.0}).shape == (0,)
    # min_trials=3 keeps task 111 (3 trials) and leaves out task 222 (2 trials)
    assert np.allclose(network_curve(tmp_path, {"111": 2.0, "222": 3.0}, min_trials=3),
                       [2 * 4e-3, 2 * 4e-3, 2 * 4e-3, 2 * 1e-3, 2 * 1e-3])
    # a task whose every trial failed counts with weight 0 (else the network never has a latency)
    (tmp_path / "database_workload.json").write_text("".join(json.dumps(x) + "\n" for x in wl + [["333", "c"]]))
    with (tmp_path / "database_tuning_record.json").open("a") as f:
        f.write(json.dumps([2, ["t", [1e10], {}, []]]) + "\n")
    curve = network_curve(tmp_path, {"111": 2.0, "222": 3.0, "333": 5.0})
    assert np.isfinite(curve[-1]) and curve[-1] == pytest.approx(2 * 1e-3 + 3 * 2e-3)

def test_gap_breakdown_splits_end_to_end_time_into_tasks_other_calls_and_overhead(tmp_path, monkeypatch):
    from types import SimpleNamespace

    import benchmarks.tune_network
    from benchmarks.tune_network import gap_breakdown

    wl = [["111", "a"], ["222", "b"]]
    recs = [[0, ["t", [4e-3], {}, []]], [1, ["t", [1e-3, 3e-3], {}, []]], [0, ["t", [1e-3], {}, []]]]
    (tmp_path / "database_workload.json").write_text("".join(json.dumps(x) + "\n" for x in wl))
    (tmp_path / "database_tuning_record.json").write_text("".join(json.dumps(x) + "\n" for x in recs))
    monkeypatch.setattr(benchmarks.tune_network, "structural_hash", lambda mod: mod)  # a task's mod is its hash here
    tasks = [SimpleNamespace(name="fused_dense", weight=2.0, mod="111"),
             SimpleNamespace(name="fused_conv", weight=3.0, mod="222"),
             SimpleNamespace(name="never_tuned", weight=1.0, mod="333")]
    profile = {"fused_dense": 3e-3, "fused_conv": 7e-3, "vm.builtin.alloc_storage": 1e-4, "layout_transform": 2e-3}
    gap = gap_breakdown(tmp_path, tasks, profile, e2e_s=13e-3)
    assert gap["tuned_sum_s"] == pytest.approx(2 * 1e-3 + 3 * 2e-3) and gap["unmeasured_tasks"] == ["never_tuned"]
    by_name = {r["name"]: r for r in gap["per_task"]}
    assert by_name["fused_dense"]["tuned_s"] == pytest.approx(2 * 1e-3) and by_name["fused_dense"]["trials"] == 2
    assert by_name["fused_conv"]["tuned_s"] == pytest.approx(3 * 2e-3)
    assert [r["name"] for r in gap["per_task"]][:2] == ["fused_conv", "fused_dense"]  # largest in the network first
    assert gap["tasks_in_network_s"] == pytest.approx(10e-3)
    assert gap["other_calls_s"] == pytest.approx(2.1e-3)
    assert gap["overhead_s"] == pytest.approx(13e-3 - 12.1e-3)
    assert set(gap["other_calls"]) == {"vm.builtin.alloc_storage", "layout_transform"}

def test_network_tuning_config_and_cli_errors(capsys):
    from benchmarks.tune_network import NetworkTuneConfig, format_network_tuning
    from cdmpp.cli import main

    with pytest.raises(ValueError, match="unknown cost models"):
        NetworkTuneConfig(network="dcgan-b1", cost_models=("ansor",))
    with pytest.raises(ValueError, match=">= 1"):
        NetworkTuneConfig(network="dcgan-b1", trials=0)
    assert main(["bench", "tune", "--network", "dcgan-b1"]) == 2
    assert "--whole-network" in capsys.readouterr().err
    row = {"network": "dcgan-b1", "cost_model": "xgb", "seed": 0, "tasks": 5, "trials": 8, "tuned_sum_s": 6e-3,
           "e2e_s": 7e-3, "compile_s": 1.0, "tune_s": 90.0}
    assert "6.00" in format_network_tuning([row]) and "1.5" in format_network_tuning([row])

def test_a_longer_xgboost_reference_is_the_yardstick():
    from benchmarks.tune import with_reference

    curves = {"t": {"xgb": {0: best_so_far([[4.0], [3.0]])}, "cdmpp": {0: best_so_far([[2.5], [1.5]])}}}
    ref = {"t": {"xgb": {0: best_so_far([[5.0], [3.0], [2.0], [1.0]])}}, "other": {"xgb": {0: best_so_far([[1.0]])}}}
    both, name = with_reference(curves, ref)
    assert name == "xgb 4" and set(both) == {"t"} and "xgb 4" not in curves["t"]  # the input is left as it was
    table = reach_table(both, markdown=False, yardstick=name)
    cdmpp_row = next(line for line in table.splitlines() if " cdmpp " in line)
    assert "1.50" in cdmpp_row and "never" in cdmpp_row  # 1.5 s against the reference's 1.0 s, never reached
    assert "0.50" in next(line for line in reach_table(curves, markdown=False).splitlines() if " cdmpp " in line)
    assert with_reference(curves, {"t": {"cdmpp": {0: best_so_far([[1.0]])}}}) == (curves, "xgb")
    two_seeds = {"t": {"cdmpp": {0: best_so_far([[1.5]]), 1: best_so_far([[9.0]])}}}
    row = next(line for line in reach_table(with_reference(two_seeds, ref)[0], markdown=False, yardstick="xgb 4")
               .splitlines() if " cdmpp " in line)
    assert row.split()[2:4] == ["1", "1.50"]  # only the seed paired with the reference's one run counts

def test_ratio_summary_pairs_seeds_with_the_yardstick_and_averages_over_tasks_then_seeds():
    from benchmarks.tune import ratio_summary

    ref = {0: best_so_far([[4.0], [2.0], [2.0], [1.0]]), 1: best_so_far([[2.0], [2.0], [2.0], [2.0]])}  # finals 1, 2
    curves = {
        "a": {"xgb 4": ref, "cdmpp": {0: best_so_far([[3.0], [1.0]]), 1: best_so_far([[2.0], [4.0]])}},
        "b": {"xgb 4": {0: ref[0]}, "cdmpp": {0: best_so_far([[2.0], [2.0]])}},  # no yardstick run for seed 1
    }
    rows = {tuple(line.split()[:3]): line.split()[3:] for line in
            ratio_summary(curves, yardstick="xgb 4", at=(1, 2), markdown=False).splitlines()}
    # seed 0: task a 3.0/1 then 1.0/1, task b 2.0/1 then 2.0/1 -> means 2.5 and 1.5; a reached it
    assert rows[("cdmpp", "0", "2")] == ["2.500", "1.500", "1", "of", "2"]
    # seed 1: task a only, 2.0/2.0 after both trials -> 1.0, reached at trial 1
    assert rows[("cdmpp", "1", "1")] == ["1.000", "1.000", "1", "of", "1"]
    mean = next(v for k, v in rows.items() if k[0] == "cdmpp" and k[1] == "mean")
    assert mean[:4] == ["3", "1.750", "(1.000-2.500)", "1.250"]
    # the yardstick's own run at k trials: 4.0 then 2.0 over its final 1.0 in both tasks of seed 0
    assert rows[("xgb", "4", "0")] == ["2", "4.000", "2.000", "0", "of", "2"]

def test_wall_time_to_a_trial_count_comes_from_the_scheduler_log_then_from_the_kept_file(tmp_path):
    from benchmarks.tune import (
        WALL_FILE,
        ratio_summary,
        save_trial_walls,
        seconds_to_trials,
        trial_walls,
    )

    log = tmp_path / "logs" / "tvm.s_tir.meta_schedule.logging.task_scheduler.log"
    log.parent.mkdir()
    log.write_text(
        "2026-11-27 00:17:41 [INFO] Logging directory: x\n"
        "2026-11-27 00:17:41 [INFO] [task_scheduler.cc:344] \n ID | Name | Trials \nTotal trials: 0\n\n"
        "2026-11-27 00:17:53 [INFO] [task_scheduler.cc:261] [Updated] Task #0\n"
        "2026-11-27 00:17:53 [INFO] [task_scheduler.cc:344] \nTotal trials: 16\n"
        "2026-11-27 00:19:01 [INFO] [task_scheduler.cc:344] \nTotal trials: 32\n"
    )
    assert trial_walls(tmp_path) == [(0, 0.0), (16, 12.0), (32, 80.0)]
    assert seconds_to_trials(tmp_path, 20) == 80.0 and seconds_to_trials(tmp_path, 64) is None
    assert save_trial_walls(tmp_path) == tmp_path / WALL_FILE
    log.unlink()  # the logs are not kept in git; the small file is
    assert seconds_to_trials(tmp_path, 16) == 12.0
    assert trial_walls(tmp_path / "nothing") == [] and save_trial_walls(tmp_path / "nothing") is None

    curves = {"t": {"xgb": {0: best_so_far([[1.0], [1.0]])}, "cdmpp": {0: best_so_far([[1.0], [1.0]])}}}
    table = ratio_summary(curves, at=(2,), markdown=False, walls={"t": {"cdmpp": {0: 12.0}, "xgb": {0: None}}})
    rows = {line.split()[0]: line.split() for line in table.splitlines()[2:]}
    assert rows["cdmpp"][-1] == "12.0" and rows["xgb"][-1] == "-"

def test_a_rerun_with_another_budget_goes_beside_the_kept_records(tmp_path, monkeypatch):
    from benchmarks import tune
    from cdmpp.errors import InputError

    model_dir = tmp_path / "00-fused_dense" / "xgb"
    kept = model_dir / "seed0"
    kept.mkdir(parents=True)
    (kept / "database_tuning_record.json.gz").write_bytes(b"kept")
    monkeypatch.setattr(tune, "run_trials", lambda d: [[1e-3]] * 64 if d == kept else [])
    assert tune.run_dir(model_dir, 0, 64) == kept  # the finished run is read back
    assert tune.run_dir(model_dir, 0, 512) == tmp_path / "00-fused_dense" / "xgb-512trials" / "seed0"
    assert tune.run_dir(model_dir, 1, 512) == model_dir / "seed1"  # nothing kept there
    with pytest.raises(InputError, match="not overwritten"):
        tune.start_run(kept, guard=None, progress=False, message="")
    assert (kept / "database_tuning_record.json.gz").read_bytes() == b"kept"

def test_runs_are_paired_by_seed_number_not_by_position(tmp_path):
    """seed10 sorts before seed2 as text, and a model may lack a seed: pairing goes by number."""
    from benchmarks.tune import ratio_summary, run_seed

    def run(model, seed, latencies):
        d = tmp_path / "00-fused_dense" / model / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "database_workload.json").write_text(json.dumps(["111", "a"]) + "\n")
        (d / "database_tuning_record.json").write_text(
            "".join(json.dumps([0, ["t", [x], {}, []]]) + "\n" for x in latencies))

    run("xgb", 2, [2.0])
    run("xgb", 10, [10.0])
    run("cdmpp", 10, [5.0])  # no seed 2 for cdmpp
    curves = tuning_curves(tmp_path)
    assert list(curves["fused_dense"]["xgb"]) == [2, 10] and run_seed(tmp_path / "seed10") == 10
    rows = {tuple(line.split()[:3]): line.split()[3:] for line in
            ratio_summary(curves, at=(1,), markdown=False).splitlines()}
    assert rows[("cdmpp", "10", "1")][0] == "0.500"  # 5.0 against seed 10's 10.0, not seed 2's 2.0
    assert not any(k[0] == "cdmpp" and k[1] == "2" for k in rows)

def test_the_held_out_table_has_one_table_per_plugin_variant_from_the_kept_records(tmp_path):
    """The search settings' published means, read back from the records in git."""
    import shutil
    from pathlib import Path

    from benchmarks.tune_cli import _write_held_out_table

    root = Path(__file__).resolve().parents[2] / "datasets/tuning/cpu-amd_epyc-znver4-avx512"
    out = shutil.copytree(root / "heldout6-search-64", tmp_path / "search")
    _write_held_out_table(out, root / "heldout6-xgb-512", 16, ["cdmpp-wide", "cdmpp-explore"])
    text = (out / "tune_heldout.md").read_text()
    tables = [t for t in text.split("\n\n") if t.strip()]
    assert len(tables) == 2 and "cdmpp-wide 64 / xgb 512" in tables[0] and "cdmpp-explore 64 / xgb 512" in tables[1]
    means = [t.splitlines()[-1].split("|") for t in tables]
    assert [m[3].strip() for m in means] == ["1.20", "1.32"]  # after 32 trials over XGBoost's 256-trial best
    assert [m[4].strip() for m in means] == ["1.21", "1.27"]  # after 64 over its 512

def test_retimed_held_out_table_compares_records_timed_again_and_refuses_another_device(tmp_path, monkeypatch, capsys):
    """Runs of two days compared from one run's timings: the kept rocketlake records, each
    compared best record "timed again" at one latency, give every ratio 1.00."""
    import shutil
    from pathlib import Path

    from benchmarks import tune_table
    from benchmarks.tune_cli import _write_held_out_table
    from cdmpp.device import DeviceDescriptor
    from cdmpp.errors import InputError

    root = Path(__file__).resolve().parents[2] / "datasets/tuning"
    here = root / "cpu-intel_xeon_processor-rocketlake-avx512"
    out = shutil.copytree(here / "heldout8-plugin-128", tmp_path / "plugin")
    device = DeviceDescriptor.from_json(json.loads((here / "heldout8-xgb-256/device.json").read_text()))
    monkeypatch.setattr(tune_table, "local_cpu", lambda: device)
    timed = []
    monkeypatch.setattr(tune_table, "retime_records", lambda records, target: timed.append(records) or
                        {k: 1e-3 for k in records})
    recorded, _ = tune_table.held_out_table(out, here / "heldout8-xgb-256")
    assert "cdmpp 32 / xgb 256" in recorded and "cdmpp 64 / xgb 512" not in recorded  # no 512-trial reference
    _write_held_out_table(out, here / "heldout8-xgb-256", 16, ["cdmpp"], None, retime=True)
    text = (out / "tune_heldout.md").read_text()
    mean = text.splitlines()[-1].split("|")
    assert mean[3:6] == [" 1.00 "] * 3 and mean[3:6] != recorded.splitlines()[-1].split("|")[3:6]
    rows = (out / "tune_retimed.csv").read_text().splitlines()
    # 8 tasks: the plugin's best after 32, 64 and 128 trials, XGBoost's after 256 (one seed each)
    assert len(rows) == 1 + 8 * 4 and rows[0] == "task,cost_model,seed,trials,recorded_s,retimed_s"
    assert len(timed) == 1 and len(timed[0]) <= 8 * 4  # one batch; a record best at two counts timed once
    order = [Path(run).parts[-4:-2] for run, _ in timed[0]]  # .../<network>/<task>/<cost model>/seed<k>
    blocks = [t for i, t in enumerate(order) if i == 0 or t != order[i - 1]]
    assert len(blocks) == len(set(order)) == 8  # task by task: each task's plugin and XGBoost records together
    assert all({Path(r).parts[-2] for r, _ in timed[0] if Path(r).parts[-4:-2] == t} == {"cdmpp", "xgb"} for t in blocks)
    assert "cdmpp: retimed / recorded" in capsys.readouterr().out
    bare = shutil.copytree(root / "cpu-amd_epyc-znver4-avx512/heldout6-xgb-512", tmp_path / "bare",
                           ignore=shutil.ignore_patterns("device.json"))
    with pytest.raises(InputError, match="no device.json"):  # an output that names no device
        tune_table.retime_held_out(out, bare)
    (out / "device.json").write_text(json.dumps({**device.to_json(), "device_id": "cpu-other"}))
    with pytest.raises(InputError, match="holds tuning runs of cpu-other"):
        tune_table.retime_held_out(out, here / "heldout8-xgb-256")

def test_retime_rounds_keep_each_records_median_and_every_round(tmp_path, monkeypatch, capsys):
    """Three rounds of timings: the plugin's records time at 1, 5 and 2 ms, XGBoost's at
    2 ms every round, so every ratio is the median's, 2 / 2 = 1.00, not the first round's
    0.50 or the mean's 1.33; each round is a column of tune_retimed.csv."""
    import shutil
    from pathlib import Path

    from benchmarks import tune_table
    from benchmarks.tune_cli import _write_held_out_table
    from cdmpp.device import DeviceDescriptor
    from cdmpp.errors import InputError

    here = Path(__file__).resolve().parents[2] / "datasets/tuning/cpu-intel_xeon_processor-rocketlake-avx512"
    out = shutil.copytree(here / "heldout8-plugin-128", tmp_path / "plugin")
    device = DeviceDescriptor.from_json(json.loads((here / "heldout8-xgb-256/device.json").read_text()))
    monkeypatch.setattr(tune_table, "local_cpu", lambda: device)
    plugin_ms = iter([1e-3, 5e-3, 2e-3])
    calls = []

    def timed_again(records, target):
        ms = next(plugin_ms)
        calls.append(len(records))
        return {k: (2e-3 if "/xgb/" in k[0] else ms) for k in records}

    monkeypatch.setattr(tune_table, "retime_records", timed_again)
    _write_held_out_table(out, here / "heldout8-xgb-256", 16, ["cdmpp"], None, retime=True, rounds=3)
    assert len(calls) == 3 and len(set(calls)) == 1  # every record in every round
    mean = (out / "tune_heldout.md").read_text().splitlines()[-1].split("|")
    assert mean[3:6] == [" 1.00 "] * 3
    rows = (out / "tune_retimed.csv").read_text().splitlines()
    assert rows[0] == "task,cost_model,seed,trials,recorded_s,retimed_s,round1_s,round2_s,round3_s"
    plugin_row = next(r.split(",") for r in rows[1:] if ",cdmpp," in r)
    assert [float(x) for x in plugin_row[5:]] == [2e-3, 1e-3, 5e-3, 2e-3]
    assert "slowest / fastest of a record's 3 rounds: median 5.00, largest 5.00" in capsys.readouterr().out  # 24 of 32 rows are the plugin's
    with pytest.raises(InputError, match="rounds=0"):
        tune_table.retime_held_out(out, here / "heldout8-xgb-256", rounds=0)

def test_a_summary_names_the_checkpoint_each_plugin_run_was_tuned_with(tmp_path):
    """A summary written later, with another checkpoint given, names the checkpoint its
    plugin runs recorded when they were tuned; runs that record none are named with the
    given checkpoint, marked as such; XGBoost's runs record nothing."""
    from benchmarks.tune import CHECKPOINT_FILE, record_checkpoint
    from benchmarks.tune_table import runs_checkpoint_line
    from cdmpp import dataset as ds
    from cdmpp.train.report import checkpoint_line

    def run(model, seed):
        d = tmp_path / "net" / "00-matmul" / model / f"seed{seed}"
        d.mkdir(parents=True)
        (d / ds.RECORD_FILE).write_text("")
        return d

    old, new = "Checkpoint: `old` (weights sha256 aaaaaaaaaaaa)", "Checkpoint: `new` (weights sha256 bbbbbbbbbbbb)"
    xgb = run("xgb", 0)
    record_checkpoint(xgb, "xgb", None)
    assert not (xgb / CHECKPOINT_FILE).exists()
    assert runs_checkpoint_line(tmp_path, None) is None
    plugin = run("cdmpp", 0)
    (plugin / CHECKPOINT_FILE).write_text(old + "\n")
    assert runs_checkpoint_line(tmp_path, new) == old
    run("cdmpp-256trials", 1)
    assert runs_checkpoint_line(tmp_path, new).splitlines() == [
        old, f"{new} (given to this summary: 1 of the plugin runs record no checkpoint)"]
    record_checkpoint(plugin, "cdmpp", None)
    assert (plugin / CHECKPOINT_FILE).read_text().strip() == checkpoint_line(None)
