import dataclasses

import numpy as np
import pytest
import torch

from cdmpp.cli import main
from cdmpp.train.finetune import FineTuneConfig, fine_tune, program_embeddings, select_shots
from cdmpp.train.metrics import rmse_log
from cdmpp.train.fit import predict_latency_array
from cdmpp.model import LatencyTransformer, ModelConfig, load_checkpoint, save_checkpoint


def _model():
    torch.manual_seed(0)
    return LatencyTransformer(ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64)).eval()


def test_kmeans_shots_are_distinct_candidates_chosen_without_labels(tiny_featurized):
    _, data = tiny_featurized
    model = _model()
    candidates = np.arange(1, len(data))
    shots = select_shots(model, data, candidates, FineTuneConfig(shots=3))
    assert shots.dtype == np.int64 and len(set(shots.tolist())) == 3 and set(shots) <= set(candidates)
    assert np.all(np.diff(shots) > 0)
    relabelled = dataclasses.replace(data, latency=np.ones_like(data.latency))
    assert select_shots(model, relabelled, candidates, FineTuneConfig(shots=3)).tolist() == shots.tolist()
    assert program_embeddings(model, data, candidates).shape == (len(candidates), 32)
    # asking for more shots than candidates takes them all; random choice is seeded
    assert select_shots(model, data, candidates, FineTuneConfig(shots=99)).tolist() == candidates.tolist()
    r = FineTuneConfig(shots=2, selection="random", seed=3)
    assert select_shots(model, data, candidates, r).tolist() == select_shots(model, data, candidates, r).tolist()
    with pytest.raises(ValueError, match="no candidate"):
        select_shots(model, data, np.array([], dtype=np.int64), FineTuneConfig())
    with pytest.raises(ValueError, match="selection"):
        FineTuneConfig(selection="greedy")
    with pytest.raises(ValueError, match="shots"):
        FineTuneConfig(shots=0)


def test_fine_tune_learns_the_shots_and_leaves_the_source_model_alone(tiny_featurized):
    _, data = tiny_featurized
    model = _model()
    model.set_normalization(torch.from_numpy(data.x), torch.from_numpy(np.log(data.latency)))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    shots = np.arange(len(data))
    # untrained, it predicts about the mean log-latency; fine-tuned on these very programs, it fits them
    err_before = rmse_log(predict_latency_array(model, data, shots), data.latency[shots])
    tuned = fine_tune(model, data, shots, FineTuneConfig(method="full", epochs=60, lr=3e-3, batch_size=4))
    err_after = rmse_log(predict_latency_array(tuned, data, shots), data.latency[shots])
    assert err_before > 0.3 and err_after < 0.5 * err_before
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # 10 optimiser steps in all (one batch a epoch) once crashed the one-cycle schedule
    ten = FineTuneConfig(method="full", epochs=10)
    assert np.all(np.isfinite(predict_latency_array(fine_tune(model, data, shots, ten), data)))
    with pytest.raises(ValueError, match="at least one"):
        fine_tune(model, data, np.array([], dtype=np.int64))


def test_offset_moves_the_level_to_the_shots_and_keeps_the_order(tiny_featurized):
    _, data = tiny_featurized
    model = _model()
    model.set_normalization(torch.from_numpy(data.x), torch.from_numpy(np.log(data.latency)))
    shots = np.arange(0, len(data), 2)
    # a device that is 3x slower on every program: the offset recovers the factor from the shots
    slower = dataclasses.replace(data, latency=3.0 * data.latency)
    before = predict_latency_array(model, data)
    base = predict_latency_array(model, slower, shots)
    tuned = fine_tune(model, slower, shots, FineTuneConfig(method="offset"))
    after = predict_latency_array(tuned, slower)
    factor = np.exp(np.mean(np.log(slower.latency[shots]) - np.log(base)))
    np.testing.assert_allclose(after, before * factor, rtol=1e-4)
    assert np.mean(np.log(after[shots]) - np.log(slower.latency[shots])) == pytest.approx(0.0, abs=1e-4)
    assert np.array_equal(np.argsort(after), np.argsort(before))
    assert model.label_mean.item() == pytest.approx(np.log(data.latency).mean(), rel=1e-5)  # source untouched
    broken = dataclasses.replace(slower, latency=np.where(np.arange(len(data)) == 0, 0.0, slower.latency))
    with pytest.raises(ValueError, match="positive"):
        fine_tune(model, broken, shots, FineTuneConfig(method="offset"))
    with pytest.raises(ValueError, match="method"):
        FineTuneConfig(method="bias")


def test_cli_finetune_writes_a_checkpoint_and_scores_the_rest(tiny_collection, tmp_path, capsys):
    _, summary = tiny_collection
    src = save_checkpoint(_model(), tmp_path / "src", {"holdout": None})
    out = tmp_path / "tuned"
    args = ["finetune", "-c", str(src), "-d", str(summary.device_dir), "--cache", str(tmp_path / "c")]
    assert main(args + ["--shots", "3", "--epochs", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "zero-shot transformer" in text and "fine-tuned transformer" in text and "after 3 shots" in text
    assert "offset-tuned transformer" in text
    tuned, meta = load_checkpoint(out)
    assert meta["fine_tune"]["programs"] == 3 and meta["device_id"] == summary.device_dir.name
    assert meta["fine_tune"]["method"] == "offset"
    # the offset copy differs from its source in the label mean only
    source, _ = load_checkpoint(src)
    differ = [k for k, v in tuned.state_dict().items() if not torch.equal(v, source.state_dict()[k])]
    assert differ == ["label_mean"]
    assert main(args + ["--shots", "999"]) == 2
    assert "none is left to score" in capsys.readouterr().err


def test_measure_shots_then_adapt_on_them(tiny_collection, tmp_path, capsys):
    """The new-device flow: choose programs measured elsewhere, time only those here, adapt."""
    from cdmpp import dataset as ds

    _, summary = tiny_collection
    src = save_checkpoint(_model(), tmp_path / "src", {"holdout": None})
    new = tmp_path / "new-device"
    args = ["measure-shots", "-c", str(src), "-d", str(summary.device_dir), "-o", str(new)]
    args += ["--shots", "2", "--cache", str(tmp_path / "c")]
    assert main(args) == 0
    assert "2 measured, 0 failed" in capsys.readouterr().out
    folder = ds.device_dirs(new)[0]
    db, source = ds.load_device_dir(folder), ds.load_device_dir(summary.device_dir)
    assert len(db.programs) == 2 and all(len(p.run_secs) in (4, 10) and p.latency > 0 for p in db.programs)
    # the tasks come with their network and task weight; every program is one of the source's
    assert {t["network"] for t in db.manifest["tasks"]} == {"dcgan-b1"}
    assert set(db.workload_keys) <= set(source.workload_keys)
    assert db.manifest["collections"][-1]["measured"] == 2 and "kmeans" in db.manifest["collections"][-1]["note"]
    # the same choice again: nothing is measured twice
    assert main(args) == 0
    assert "0 measured, 0 failed, 2 already there" in capsys.readouterr().out
    assert len(ds.load_device_dir(folder).programs) == 2
    out = tmp_path / "adapted"
    tune = ["finetune", "-c", str(src), "-d", str(folder), "--all-shots", "--cache", str(tmp_path / "c")]
    assert main(tune) == 2 and "needs -o" in capsys.readouterr().err
    assert main(tune + ["-o", str(out)]) == 0
    _, meta = load_checkpoint(out)
    assert meta["fine_tune"]["programs"] == 2 and meta["fine_tune"]["method"] == "offset"
