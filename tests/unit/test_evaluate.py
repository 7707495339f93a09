import pytest


def test_pooled_programs_leave_out_held_out_and_validation_workloads():
    import numpy as np

    from cdmpp.train.train import pooled_training_programs

    workload = np.array([0, 0, 1, 2, 2, 3, 4])
    keys = ["a", "b", "c", "d", "e"]
    tasks = [{"network": "n1", "workload_key": "a"}, {"network": "n2", "workload_key": "e"}]
    # b: the trained device's validation workload; e: the held-out network's, known only from this manifest
    keep = pooled_training_programs(workload, keys, {"tasks": tasks}, {"b", "zz"}, "n2")
    assert keep.tolist() == [0, 1, 3, 4, 5] and keep.dtype == np.int64
    assert pooled_training_programs(workload, keys, {"tasks": tasks}, set(), None).tolist() == list(range(7))

def test_the_shipped_checkpoint_knows_both_gpus_and_a_cuda_target_picks_one():
    """The measured H200 programs (CUDA) featurize on a CPU-only machine; the shipped
    checkpoint trained on them and on the H100's. TVM's H100 tag picks the
    H100's row; a bare sm_90 target matches both, picks the first and says so. It scores
    the H200's programs as a known device, far closer than the CPU-only model's
    zero-shot RMSE(log) of 4.6."""
    import gzip
    from pathlib import Path

    from cdmpp.predictor import DEFAULT_CHECKPOINT, DeviceChoiceWarning, LatencyPredictor
    from cdmpp.train.evaluate import evaluate_checkpoint

    h200, h100 = "gpu-nvidia_h200-sm90", "gpu-nvidia_h100_80gb_hbm3-sm90"
    p = LatencyPredictor.load()
    assert h200 in p.devices and h100 in p.devices
    assert p.resolve_device(target="nvidia/nvidia-h100").device_id == h100
    first = next(d for d in p.devices if d in (h200, h100))  # the first of the two in the device table
    with pytest.warns(DeviceChoiceWarning, match=f"matches 2 known devices.*predicting for {first}"):
        assert p.resolve_device(target={"kind": "cuda", "arch": "sm_90"}).device_id == first
    folder = Path(__file__).parents[2] / "datasets" / "gpu" / h200
    rows, title = evaluate_checkpoint(DEFAULT_CHECKPOINT, dataset=folder, holdout=None, progress=False)
    assert "is not in this checkpoint" not in title
    with gzip.open(folder / "database_tuning_record.json.gz", "rt") as f:
        measured = sum(1 for _ in f)  # every record of the folder is a measured program
    row = rows["cdmpp transformer"]
    assert measured >= 797 and row["programs"] == measured
    assert row["rmse_log"] < 1.0 and row["kendall_tau"] > 0.3
