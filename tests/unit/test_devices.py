"""One model over several devices: the device table, the API's device rule, adapt."""

import json
import shutil
import warnings

import numpy as np
import pytest
from support import AVX2

AVX512 = "cpu-intel_xeon_processor-emeraldrapids-avx512"

def test_descriptor_target_match_and_nearest_device():
    from cdmpp.device import DESCRIPTOR_DIM, DESCRIPTOR_FEATURES, DeviceDescriptor, descriptor_vector
    from cdmpp.device_choice import devices_for_target, nearest_device

    def dev(i, model, mcpu, isa, flags, mattr=None):
        t = {"kind": "llvm", "num-cores": 2, "mcpu": mcpu, **({"mattr": mattr} if mattr else {})}
        return DeviceDescriptor(i, "cpu", model, 2, isa, tuple(flags), t)

    zen3 = dev("z3", "AMD EPYC", "znver3", "avx2", ["avx2"])
    zen4 = dev("z4", "AMD EPYC", "znver4", "avx512", ["avx2", "avx512f", "avx512_bf16"])
    intel = dev("i5", "Intel(R) Xeon(R)", "emeraldrapids", "avx512", ["avx2", "avx512f", "avx512_fp16"])
    intel2 = dev("i2", "Intel(R) Xeon(R)", "emeraldrapids", "avx2", ["avx2", "avx512f"], ["-avx512f"])
    v = descriptor_vector(zen4)
    assert v.shape == (DESCRIPTOR_DIM,) and v.dtype == np.float32
    on = {DESCRIPTOR_FEATURES[i] for i in np.flatnonzero(v[:-1])}
    assert on == {"kind_cpu", "vendor_amd", "isa_avx512", "flag_avx512_bf16"}
    assert v[-1] == 1.0  # log2 of 2 cores
    known = [zen3, zen4, intel, intel2]
    assert devices_for_target({"kind": "llvm", "mcpu": "znver4"}, known) == [zen4]
    assert devices_for_target({"kind": "llvm", "mcpu": "emeraldrapids", "mattr": ["-avx512f"]}, known) == [intel2]
    assert devices_for_target({"kind": "llvm", "mcpu": "emeraldrapids"}, known) == [intel]
    assert devices_for_target({"kind": "llvm"}, known) == []  # generic x86-64 names no CPU
    zen5 = dev("z5", "AMD EPYC", "znver5", "avx512", ["avx2", "avx512f", "avx512_bf16"])
    assert nearest_device(zen5, known) is zen4  # same vendor, ISA and flags
    assert nearest_device(dev("x", "AMD EPYC", "znver3", "avx2", []), known) is zen3  # same LLVM CPU

def test_two_gpus_of_one_cuda_arch_a_tag_picks_the_model_else_a_warning_names_both():
    """The H100 and H200 are both sm_90: TVM's H100 tag (arch sm_90a) names the model,
    a bare arch matches both and the predictor warns which it chose."""
    from cdmpp.device import DeviceDescriptor
    from cdmpp.device_choice import devices_for_target
    from cdmpp.predictor import DeviceChoiceWarning, LatencyPredictor

    def gpu(i, model):
        return DeviceDescriptor(i, "gpu", model, 16, "sm_90", (), {"kind": "cuda", "arch": "sm_90"})

    h200 = gpu("gpu-nvidia_h200-sm90", "NVIDIA H200")
    h100 = gpu("gpu-nvidia_h100_80gb_hbm3-sm90", "NVIDIA H100 80GB HBM3")
    known = [h200, h100]
    assert devices_for_target("nvidia/nvidia-h100", known) == [h100]  # the tag's arch is sm_90a
    assert devices_for_target({"kind": "cuda", "arch": "sm_90"}, known) == [h200, h100]
    assert devices_for_target({"kind": "cuda", "arch": "sm_80"}, known) == []
    meta = {"devices": [{"row": i + 1, "descriptor": d.to_json()} for i, d in enumerate(known)]}
    p = LatencyPredictor(model=None, metadata=meta)
    assert p.devices == [h200.device_id, h100.device_id]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert p.resolve_device(target="nvidia/nvidia-h100").device_id == h100.device_id
    with pytest.warns(DeviceChoiceWarning, match="matches 2 known devices.*predicting for gpu-nvidia_h200"):
        assert p.resolve_device(target={"kind": "cuda", "arch": "sm_90"}).device_id == h200.device_id

def test_strict_split_keeps_every_task_on_one_side(two_device_dataset):
    from cdmpp.train.devices import load_corpus, split_corpus

    corpus = load_corpus(two_device_dataset, None, progress=False)
    assert [d.device_id for d in corpus.devices] == [AVX2, AVX512]
    assert set(np.unique(corpus.data.device_row)) == {1, 2}
    split = split_corpus(corpus, "dcgan-b1")
    sides = [set(corpus.raw_keys[s]) for s in (split.train, split.val, split.test)]
    assert not (sides[0] & sides[1]) and not (sides[0] & sides[2]) and not (sides[1] & sides[2])
    assert sides[2] == corpus.networks()["dcgan-b1"] & set(corpus.raw_keys)
    # the held-out network's workloads are test on both devices
    assert set(corpus.data.device_row[split.test]) == {1, 2}
    with pytest.raises(ValueError, match="not in this dataset"):
        split_corpus(corpus, "no_such_net")

def test_checkpoint_knows_its_devices_and_predicts_for_the_chosen_one(device_checkpoint, two_device_dataset):
    import cdmpp
    from cdmpp import dataset as ds
    from cdmpp.predictor import DeviceChoiceWarning, LatencyPredictor

    out, rows = device_checkpoint
    assert set(rows) == {AVX2, AVX512}
    p = LatencyPredictor.load(out)
    assert p.devices == [AVX2, AVX512]
    meta = json.loads((out / "config.json").read_text())
    assert meta["model"]["num_devices"] == 2
    recs = [q.record for q in ds.load_device_dir(two_device_dataset / AVX512).programs[:4]]
    a = p.predict(recs, device=AVX512)
    b = p.predict(recs, device=AVX2)
    assert a.shape == (4,) and np.all(a > 0) and not np.allclose(a, b)
    # a target whose mcpu and AVX-512 switch match picks that device, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t2 = {"kind": "llvm", "num-cores": 2, "mcpu": "emeraldrapids", "mattr": ["-avx512f"]}
        np.testing.assert_allclose(p.predict(recs, target=t2), p.predict(recs, target=t2, device=AVX2))
        assert p.resolve_device(target={"kind": "llvm", "mcpu": "emeraldrapids"}).device_id == AVX512
    # neither: this machine's descriptor picks a device, and a warning names it
    with pytest.warns(DeviceChoiceWarning, match="predicting for cpu-intel"):
        chosen = p.resolve_device()
    assert chosen.device_id in p.devices
    with pytest.raises(cdmpp.UnknownDeviceError, match="unknown device 'cpu-nowhere'.*knows cpu-intel"):
        p.predict(recs, device="cpu-nowhere")
    assert issubclass(cdmpp.UnknownDeviceError, cdmpp.CdmppError)
    card = (out / "README.md").read_text()
    assert AVX2 in card and AVX512 in card and "Held-out network dcgan-b1" in card

@pytest.mark.parametrize("head", ["device_checkpoint", "lse_device_checkpoint"])
def test_a_new_device_row_learns_its_shots_and_leaves_the_others(head, request, two_device_dataset):
    """For a mean-pooled head and for the log-sum-exp head alike: the row is fitted
    through the model's own head, so its in-sample error falls."""
    from cdmpp.checkpoint import load_checkpoint, save_checkpoint
    from cdmpp.device import DeviceDescriptor, descriptor_vector
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.train.adapt import fit_device_row, with_new_device
    from cdmpp.train.devices import load_corpus

    device_checkpoint = request.getfixturevalue(head)
    model, _ = load_checkpoint(device_checkpoint[0])
    corpus = load_corpus(two_device_dataset, None, progress=False)
    data = corpus.data
    idx = np.flatnonzero(data.device_row == 1)
    # pretend the AVX2 programs come from a new device whose latencies are 3x slower than measured
    slow = type(data)(**{**data.__dict__, "latency": data.latency * 3.0})
    desc = descriptor_vector(DeviceDescriptor.from_json(corpus.manifests[AVX2]["device"]))
    grown, row = with_new_device(model, desc)
    assert row == 3 and grown.config.num_devices == 3 and model.config.num_devices == 2
    tuned = fit_device_row(grown, slow, idx, row)

    def rmse(m):
        pred = LatencyPredictor(m, {}).predict_featurized(slow, idx, device_rows=row)
        return float(np.sqrt(np.mean((np.log(pred) - np.log(slow.latency[idx])) ** 2)))

    assert rmse(tuned) < 0.7 * rmse(grown)
    for r in (1, 2):  # the known devices' predictions do not move
        np.testing.assert_allclose(
            LatencyPredictor(tuned, {}).predict_featurized(data, idx, device_rows=r),
            LatencyPredictor(model, {}).predict_featurized(data, idx, device_rows=r), rtol=1e-5
        )
    folder = save_checkpoint(tuned, device_checkpoint[0].parent / "grown", {})
    again, _ = load_checkpoint(folder)
    np.testing.assert_allclose(
        LatencyPredictor(again, {}).predict_featurized(slow, idx, device_rows=row),
        LatencyPredictor(tuned, {}).predict_featurized(slow, idx, device_rows=row), rtol=1e-6
    )

def test_own_split_needs_every_device_it_trained_on(device_checkpoint, two_device_dataset):
    from cdmpp.errors import InputError
    from cdmpp.train.device_scores import evaluate_devices

    with pytest.raises(InputError, match=f"lacks {AVX2}, which this checkpoint trained on"):
        evaluate_devices(device_checkpoint[0], two_device_dataset / AVX512, holdout="validation", progress=False)
    rows, _ = evaluate_devices(device_checkpoint[0], two_device_dataset, holdout="validation", progress=False)
    assert AVX512 in rows and set(rows) <= {AVX2, AVX512}  # the whole dataset gives its split back

def test_cli_evaluate_prints_one_table_per_device(device_checkpoint, two_device_dataset, tmp_path, capsys):
    from cdmpp.cli import main

    png = tmp_path / "pred.png"
    argv = ["evaluate", "-c", str(device_checkpoint[0]), "-d", str(two_device_dataset), "--cache", str(tmp_path / "c")]
    assert main(argv + ["--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert f"| {AVX2} | cdmpp transformer |" in out and f"| {AVX512} | xgboost PerStoreFeature |" in out

def test_adapt_on_a_folder_measured_on_another_host_adds_that_device(device_checkpoint, tmp_path, capsys):
    """`cdmpp adapt --measured-dir`: a GPU's folder, measured on the GPU host, becomes a
    device of the checkpoint here (nothing is timed); its TVM tag then picks it."""
    from conftest import ROOT, subset_device_folder

    from cdmpp import dataset as ds
    from cdmpp.cli import main
    from cdmpp.predictor import LatencyPredictor

    h100 = "gpu-nvidia_h100_80gb_hbm3-sm90"
    folder = subset_device_folder(ROOT / "datasets/gpu" / h100, tmp_path / "gpu" / h100, 1, 4)
    n = len(ds.load_device_dir(folder).programs)
    out = tmp_path / "adapted"
    argv = ["adapt", "-c", str(device_checkpoint[0]), "--measured-dir", str(folder), "-o", str(out),
            "--cache", str(tmp_path / "cache")]
    assert main(argv) == 0
    assert f"{h100}: added as row 3 from all {n} programs" in capsys.readouterr().out
    p = LatencyPredictor.load(out)
    assert p.devices == [AVX2, AVX512, h100]
    assert p.resolve_device(target="nvidia/nvidia-h100").device_id == h100
    recs = [q.record for q in ds.load_device_dir(folder).programs]
    lat = p.predict(recs, device=h100)
    assert lat.shape == (n,) and np.all(np.isfinite(lat)) and np.all(lat > 0)
    entry = json.loads((out / "config.json").read_text())["metadata"]["devices"][-1]
    assert entry["adapted"]["shots"] == n and entry["adapted"]["source"] == str(folder)
    # a folder without a device manifest is a clear error, and nothing is written
    bare = subset_device_folder(ROOT / "datasets/gpu" / h100, tmp_path / "bare" / h100, 1, 4)
    (bare / ds.MANIFEST_FILE).unlink()
    assert main(["adapt", "-c", str(device_checkpoint[0]), "--measured-dir", str(bare), "-o", str(tmp_path / "x"),
                 "--cache", str(tmp_path / "cache")]) == 2
    assert "names no device" in capsys.readouterr().err and not (tmp_path / "x").exists()

def test_mean_kendall_tau_counts_constant_predictions_as_zero():
    from cdmpp.train.metrics import mean_kendall_tau

    true = np.array([1.0, 2.0, 3.0, 1.0, 2.0, 3.0])
    groups = np.array([0, 0, 0, 1, 1, 1])
    perfect = np.array([1.0, 2.0, 3.0, 5.0, 5.0, 5.0])  # task 0 right, task 1 constant
    assert mean_kendall_tau(perfect, true, groups) == pytest.approx(0.5)
    assert mean_kendall_tau(true, true, groups) == pytest.approx(1.0)
    # a task with constant measured latencies has no order to get right: skipped
    assert mean_kendall_tau(np.array([1.0, 2.0]), np.array([4.0, 4.0]), np.array([0, 0])) != mean_kendall_tau(
        np.array([1.0, 2.0]), np.array([4.0, 4.0]), np.array([0, 0])
    )  # NaN

def test_pairwise_accuracy_counts_ordered_pairs_within_tasks():
    from cdmpp.train.metrics import pairwise_accuracy

    true = np.array([1.0, 2.0, 3.0, 1.0, 2.0])
    groups = np.array([0, 0, 0, 1, 1])
    assert pairwise_accuracy(true, true, groups) == 1.0
    assert pairwise_accuracy(-true, true, groups) == 0.0
    # task 0: 3 pairs, one swapped; task 1: one pair, a predicted tie (half right)
    pred = np.array([2.0, 1.0, 3.0, 5.0, 5.0])
    assert pairwise_accuracy(pred, true, groups) == pytest.approx((2 + 0.5) / 4)

def test_within_task_split_puts_a_tenth_of_each_large_task_in_test(two_device_dataset):
    from cdmpp.train.devices import load_corpus, split_within_tasks

    corpus = load_corpus(two_device_dataset, None, progress=False)
    split = split_within_tasks(corpus, min_programs=8)
    w = corpus.data.workload
    assert len(np.intersect1d(split.train, split.test)) == 0 and len(np.intersect1d(split.val, split.test)) == 0
    big = [g for g in np.unique(w) if (w == g).sum() >= 8]
    assert big and set(np.unique(w[split.test])) == set(big)
    assert all(((w[split.test] == g).sum() == 2) for g in big)  # max(2, round(0.1 * 8))
    assert set(np.unique(w[split.train])) >= set(big)  # the same tasks train too

def test_leave_one_device_out_table_and_plot(two_device_dataset, tmp_path, capsys):
    from cdmpp.cli import main

    ckpt = tmp_path / "lodo"
    train = ["train", "-d", str(two_device_dataset), "--holdout", "none", "--exclude-device", AVX2, "-o", str(ckpt),
             "--no-wandb", "--epochs", "2", "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c")]
    assert main(train) == 0
    capsys.readouterr()
    png = tmp_path / "shots.png"
    table = ["bench", "adapt-table", "-c", str(ckpt), "-d", str(two_device_dataset / AVX2), "--shots", "2", "4",
             "--cache", str(tmp_path / "c"), "--plot", str(png)]
    assert main(table) == 0
    out = capsys.readouterr().out
    for row in ("zero-shot, descriptor", f"zero-shot, nearest device {AVX512}", "4 kmeans shots, nearest + row",
                "2 random shots, descriptor + offset", "4 random shots, nearest + offset"):
        assert row in out
    assert png.read_bytes()[:4] == b"\x89PNG"
    # once the left-out device's row is added afterwards (adapt --measured-dir), the table ignores that row
    known = tmp_path / "lodo-known"
    assert main(["adapt", "-c", str(ckpt), "--measured-dir", str(two_device_dataset / AVX2), "-o", str(known),
                 "--method", "row", "--cache", str(tmp_path / "c")]) == 0
    capsys.readouterr()
    assert main(table[:3] + [str(known)] + table[4:-2]) == 0
    again = capsys.readouterr().out
    assert "left out of training; its row added afterwards is ignored here" in again

    def table_rows(text):
        return [line for line in text.splitlines() if "shot" in line and "unseen by" not in line and "plot" not in line]

    assert table_rows(again) == table_rows(out) and len(table_rows(out)) == 2 + 2 * 2 * 3
    # refitting a known device's row replaces its section of the model card, not adds one
    assert main(["adapt", "-c", str(known), "--measured-dir", str(two_device_dataset / AVX2), "-o", str(known),
                 "--method", "row", "--cache", str(tmp_path / "c")]) == 0
    card = (known / "README.md").read_text()
    assert card.count(f"## Adapted: `{AVX2}`") == 1 and "started from its current row" in card
    # its own split (validation, training) is drawn over the devices it trained on, not the one adapt added
    from cdmpp.train.device_scores import evaluate_devices

    val_rows, val_title = evaluate_devices(known, two_device_dataset, holdout="validation", progress=False)
    assert set(val_rows) == {AVX512} and "validation programs" in val_title
    # a calibration afterwards writes the card again, and the adapted device's section stays
    from cdmpp.intervals import IntervalConfig
    from cdmpp.train.uncertainty import calibrate_checkpoint

    calibrated = calibrate_checkpoint(known, two_device_dataset, tmp_path / "c", IntervalConfig(passes=2),
                                      progress=False)
    _, report = calibrated["interval"]  # calibrated on the validation workloads of the device it trained on
    assert set(report["validation"]) == {"all", AVX512}
    assert next(iter(report["validation"]["all"].values()))["programs"] == val_rows[AVX512]["cdmpp transformer"]["programs"]
    recalibrated = (known / "README.md").read_text()
    assert "## Prediction intervals" in recalibrated and "## Prediction intervals" not in card
    assert recalibrated.count(f"## Adapted: `{AVX2}`") == 1
    assert recalibrated.endswith(card[card.index(f"\n## Adapted: `{AVX2}`"):])
    # scoring the left-out device says in the title that it is scored zero-shot
    from cdmpp.train.evaluate import evaluate_checkpoint

    rows, title = evaluate_checkpoint(ckpt, dataset=two_device_dataset / AVX2, holdout=None, progress=False)
    assert f"device {AVX2} is not in this checkpoint: zero-shot from its descriptor" in title
    assert rows["cdmpp transformer"]["programs"] > 0
    # a device the checkpoint was trained on is not a leave-one-device-out target
    assert main(["bench", "adapt-table", "-c", str(ckpt), "-d", str(two_device_dataset / AVX512), "--cache", str(tmp_path / "c")]) == 2

def test_evaluate_scores_a_within_task_checkpoint_on_its_own_test_programs(device_checkpoint, two_device_dataset,
                                                                          tmp_path):
    """``holdout="auto"`` on a checkpoint trained on TenSet's within-task split scores that
    split's test programs, not every program (most of which it trained on)."""
    from cdmpp.train.device_scores import evaluate_devices
    from cdmpp.train.devices import load_corpus, split_within_tasks

    corpus = load_corpus(two_device_dataset, None, progress=False)
    split = split_within_tasks(corpus, min_programs=8)
    ckpt = tmp_path / "within"
    shutil.copytree(device_checkpoint[0], ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["metadata"].update(split=split.holdout, holdout=None, train_programs=len(split.train),
                           val_programs=len(split.val), test_programs=len(split.test))
    (ckpt / "config.json").write_text(json.dumps(cfg))
    rows, title = evaluate_devices(ckpt, two_device_dataset, progress=False)
    assert "within-task test programs" in title
    counts = np.bincount(corpus.data.device_row[split.test], minlength=3)
    assert {d: r["cdmpp transformer"]["programs"] for d, r in rows.items()} == {
        dev.device_id: int(counts[i + 1]) for i, dev in enumerate(corpus.devices) if counts[i + 1]}
    assert sum(r["cdmpp transformer"]["programs"] for r in rows.values()) == len(split.test) < len(corpus.data) / 2

def test_cdmpp_protocol_filters_and_keeps_shared_tasks_on_both_sides(two_device_dataset):
    from cdmpp.train.devices import load_corpus, split_cdmpp

    corpus = load_corpus(two_device_dataset, None, progress=False)
    split, counts = split_cdmpp(corpus, "dcgan-b1", min_programs=4, max_cv=0.05)
    w, cv = corpus.data.workload, corpus.repeat_cv
    n = np.bincount(w)
    for side in (split.train, split.val, split.test):
        assert np.all(n[w[side]] >= 4) and np.all(cv[side] <= 0.05)
    assert counts["all"] == len(w) and counts["low_noise"] <= counts["tasks_with_min_programs"] <= counts["all"]
    assert counts["test"] == len(split.test) > 0
    with pytest.raises(Exception, match="nothing is left"):
        split_cdmpp(corpus, "dcgan-b1", min_programs=10_000)

def test_several_dataset_folders_pool_their_devices_once(two_device_dataset, tmp_path):
    from cdmpp.dataset import DatasetError
    from cdmpp.train.devices import corpus_dirs, load_corpus

    a, b = tmp_path / "cpu", tmp_path / "other"
    a.mkdir(), b.mkdir()
    (a / AVX512).symlink_to(two_device_dataset / AVX512)
    (b / AVX2).symlink_to(two_device_dataset / AVX2)
    assert [d.name for d in corpus_dirs([a, b])] == [AVX512, AVX2]
    corpus = load_corpus([a, b], tmp_path / "c", progress=False)
    assert [d.device_id for d in corpus.devices] == [AVX512, AVX2]
    assert sorted(set(corpus.data.device_row.tolist())) == [1, 2]
    with pytest.raises(DatasetError, match=f"{AVX2} is in both"):
        corpus_dirs([b, two_device_dataset])
    # `cdmpp train -d A B` trains one model over both folders' devices
    from cdmpp.cli import main

    ckpt = tmp_path / "both"
    assert main(["train", "-d", str(a), str(b), "--holdout", "none", "-o", str(ckpt), "--no-wandb", "--epochs", "1",
                 "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c")]) == 0
    meta = json.loads((ckpt / "config.json").read_text())["metadata"]
    assert [d["device_id"] for d in meta["devices"]] == [AVX512, AVX2] and meta["dataset"] == f"{a}, {b}"

def test_cmd_toward_the_left_out_device_reads_its_programs_but_never_trains_on_them(two_device_dataset, tmp_path):
    from cdmpp.errors import InputError
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    def train_device_model(root, holdout, out, mcfg, tcfg, cache, exclude, cmd_target=None, **kw):
        data = TrainData([root], holdout, exclude_devices=exclude, cmd_target=cmd_target, cache_dir=cache)
        return train(data, out, mcfg, tcfg, **kw)

    mcfg = ModelConfig(d_model=16, n_heads=2, ff_dim=32, n_layers=1, device_dim=4, trace_tokens=False,
                       loop_tokens=False)
    cmd = TrainConfig(epochs=1, batch_size=16, cmd_weight=0.5)
    out = tmp_path / "lodo-cmd"
    train_device_model(two_device_dataset, None, out, mcfg, cmd, tmp_path / "c", (AVX2,), use_wandb=False,
                       progress=False, cmd_target=two_device_dataset / AVX2)
    meta = json.loads((out / "config.json").read_text())["metadata"]
    assert meta["cmd_target_device"] == AVX2 and meta["excluded_devices"] == [AVX2]
    assert [d["device_id"] for d in meta["devices"]] == [AVX512]
    # every program trains or validates, but those of the held-out test networks' workloads (BERT-base's in the slice)
    assert meta["test_network_programs"] > 0
    assert meta["train_programs"] + meta["val_programs"] + meta["test_network_programs"] == meta["devices"][0]["programs"]
    # a device in training is no target, and a target needs the CMD term on
    with pytest.raises(InputError, match="is in training"):
        train_device_model(two_device_dataset, None, tmp_path / "x", mcfg, cmd, tmp_path / "c", (AVX2,),
                           use_wandb=False, progress=False, cmd_target=two_device_dataset / AVX512)
    with pytest.raises(InputError, match="needs cmd_weight > 0"):
        train_device_model(two_device_dataset, None, tmp_path / "x", mcfg, TrainConfig(epochs=1), tmp_path / "c",
                           (AVX2,), use_wandb=False, progress=False, cmd_target=two_device_dataset / AVX2)
    with pytest.raises(InputError, match="held-out network or a CMD target"):
        train_device_model(two_device_dataset, None, tmp_path / "x", mcfg, cmd, tmp_path / "c", (AVX2,),
                           use_wandb=False, progress=False)
