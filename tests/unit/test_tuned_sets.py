"""Tuned sets: a checkpoint scored on every trial of tuning runs, pooled per task; and the
held-out tuning table of the plugin's short runs against XGBoost's long ones."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cpu-amd_epyc-znver4-avx512"
CONVNEXT = ROOT / "datasets" / "tuning" / DEVICE / "unseen-convnext"
DENSE = CONVNEXT / "convnext_tiny-b1" / "00-fused_matmul4_add9"
DEPTHWISE = CONVNEXT / "convnext_tiny-b1" / "12-fused_conv2d5_add8"


def _measured(run: Path) -> int:
    from cdmpp import dataset as ds

    return len(ds.load_database(ds.resolve(run / ds.WORKLOAD_FILE), ds.resolve(run / ds.RECORD_FILE)).programs)


def test_tuned_sets_pool_each_tasks_runs_and_predict_for_the_device_the_path_names(tmp_path, capsys):
    from cdmpp.cli import main
    from cdmpp.predictor import DEFAULT_CHECKPOINT
    from cdmpp.train.evaluate import TUNED_ALL, EvaluateOptions, evaluate_checkpoint, evaluate_tuned

    runs = [DENSE / "cdmpp" / "seed0", DENSE / "cdmpp" / "seed1", DEPTHWISE / "cdmpp" / "seed0"]
    opt = EvaluateOptions(cache_dir=tmp_path / "cache", progress=False)
    rows, title = evaluate_tuned(DEFAULT_CHECKPOINT, runs, opt)
    assert f"predicted for {DEVICE}" in title and "3 tuning runs of 2 tasks" in title
    dense, dw = "convnext_tiny-b1 fused_matmul4_add9", "convnext_tiny-b1 fused_conv2d5_add8"
    assert list(rows) == [dense, dw, TUNED_ALL]
    cdmpp = {task: r["cdmpp transformer"] for task, r in rows.items()}
    assert cdmpp[dense]["runs"] == 2 and cdmpp[dense]["programs"] == _measured(runs[0]) + _measured(runs[1])
    assert cdmpp[dw]["runs"] == 1 and cdmpp[TUNED_ALL]["programs"] == sum(_measured(r) for r in runs)
    assert "xgboost PerStoreFeature" in rows[dense]
    # one run alone: the same figures as scoring its JSONDatabase, on the same device row
    alone, _ = evaluate_tuned(DEFAULT_CHECKPOINT, [runs[2]], opt)
    from cdmpp import dataset as ds

    single, single_title = evaluate_checkpoint(
        DEFAULT_CHECKPOINT, workload_db=ds.resolve(runs[2] / ds.WORKLOAD_FILE),
        record_db=ds.resolve(runs[2] / ds.RECORD_FILE), cache_dir=tmp_path / "cache", progress=False, device=DEVICE)
    assert "not in this checkpoint" not in single_title
    for key in ("mape", "kendall_tau", "best_ratio", "top1_of_8", "tau_fast_half"):
        assert alone[dw]["cdmpp transformer"][key] == pytest.approx(single["cdmpp transformer"][key], rel=1e-6)
    # as bare PrimFuncs (the shipped checkpoint reads loop tokens): the same programs, no trace token
    bare, bare_title = evaluate_tuned(DEFAULT_CHECKPOINT, [runs[2]], dataclasses.replace(opt, traces=False))
    assert "without their traces" in bare_title
    assert bare[dw]["cdmpp transformer"]["programs"] == alone[dw]["cdmpp transformer"]["programs"]
    assert bare[dw]["cdmpp transformer"]["mape"] != pytest.approx(alone[dw]["cdmpp transformer"]["mape"], rel=1e-3)
    # the command line: one row per task and model under a "task" column
    assert main(["evaluate", "--tuned", str(runs[2]), "--cache", str(tmp_path / "cache")]) == 0
    out = capsys.readouterr().out
    assert "| task | model |" in out and dw in out


def test_a_tuned_set_names_its_device_or_fails_clearly(tmp_path):
    from cdmpp.device import local_cpu
    from cdmpp.errors import InputError, UnknownDeviceError
    from cdmpp.train.evaluate import database_device, evaluate_tuned

    meta = {"devices": [{"device_id": DEVICE, "row": 1}, {"device_id": "gpu-x", "row": 2}]}
    assert database_device(meta, [DENSE], None) == (DEVICE, {})
    assert database_device(meta, [DENSE], "gpu-x") == ("gpu-x", {})
    here, manifest = database_device(meta, [tmp_path], None)  # no device in the path: this machine, zero-shot
    assert here == local_cpu().device_id and manifest["device"]["device_id"] == here
    with pytest.raises(UnknownDeviceError, match="not in this checkpoint"):
        database_device(meta, [DENSE], "cpu-nowhere")
    with pytest.raises(InputError, match="no MetaSchedule work dir"):
        evaluate_tuned(Path("cdmpp/checkpoints/default"), [tmp_path])


def test_a_tuned_set_of_a_device_the_checkpoint_does_not_know_is_read_from_its_device_json(tmp_path):
    import json
    import shutil

    from cdmpp.device import DEVICE_FILE, DeviceDescriptor, record_device
    from cdmpp.errors import InputError, UnknownDeviceError
    from cdmpp.train.evaluate import database_device

    meta = {"devices": [{"device_id": DEVICE, "row": 1}]}
    other = DeviceDescriptor("cpu-acme_x-acme1-avx2", "cpu", "ACME X", 2, "avx2", ("avx2", "fma"),
                             {"kind": "llvm", "num-cores": 2, "mcpu": "acme1"})
    out = tmp_path / other.device_id / "set"
    run = out / "convnext_tiny-b1" / "12-fused_conv2d5_add8" / "cdmpp" / "seed0"
    shutil.copytree(DEPTHWISE / "cdmpp" / "seed0", run)
    # a folder named for a device that is neither known nor this machine, and nothing describes it
    with pytest.raises(UnknownDeviceError, match="cpu-acme_x-acme1-avx2.*device.json"):
        database_device(meta, [run], None)
    record_device(out, other)
    assert json.loads((out / DEVICE_FILE).read_text())["device_id"] == other.device_id
    got, manifest = database_device(meta, [run], None)
    assert got == other.device_id and DeviceDescriptor.from_json(manifest["device"]) == other
    assert database_device(meta, [run], DEVICE) == (DEVICE, {})  # --device still wins
    record_device(out, other)  # the same device again: fine
    with pytest.raises(InputError, match="holds tuning runs of cpu-acme_x-acme1-avx2"):
        record_device(out, dataclasses.replace(other, device_id="cpu-other-x-avx2"))


def test_held_out_table_divides_seed_means_and_curves_come_every_k_trials():
    from benchmarks.tune import tuning_curves
    from benchmarks.tune_table import curve_rows, held_out_table

    table, means = held_out_table(CONVNEXT, CONVNEXT, pairs=((32, 256), (64, 256)), markdown=True)
    curves = tuning_curves(CONVNEXT)
    ratios = []
    for models in curves.values():
        plugin = np.mean([c[63] for c in models["cdmpp"].values()])
        xgb = np.mean([c[255] for c in models["xgb"].values()])
        ratios.append(plugin / xgb)
    assert means["cdmpp 64 / xgb 256"] == pytest.approx(np.mean(ratios))
    assert 0.3 < means["cdmpp 64 / xgb 256"] < 3.0 and means["cdmpp s/trial"] > 0
    assert "| mean over tasks |" in table and "3 / 3" in table
    rows = curve_rows([CONVNEXT], every=16)
    # 2 tasks x 3 seeds: 64 trials of the plugin (4 rows) and 256 of XGBoost (16 rows)
    assert len(rows) == 2 * 3 * (4 + 16)
    first = next(r for r in rows if r["cost_model"] == "cdmpp" and r["trials"] == 64 and r["seed"] == 0)
    assert first["best_s"] == pytest.approx(curves[first["task"]]["cdmpp"][0][63])
    assert first["wall_s"] is not None and first["wall_s"] > 0
