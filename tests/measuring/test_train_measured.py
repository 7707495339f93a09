import warnings

import numpy as np
import pytest
import torch

from cdmpp.checkpoint import load_checkpoint, save_checkpoint
from cdmpp.errors import CheckpointError
from cdmpp.model import ModelConfig
from cdmpp.predictor import LatencyPredictor
from cdmpp.train.fit import fit_transformer
from cdmpp.train.lightning import ProgramDataModule, TrainConfig
from cdmpp.train.splits import holdout_network


def _split(data, manifest_tasks):
    return holdout_network(data.workload, data.workload_keys, {"tasks": manifest_tasks}, None, val_fraction=0.5)

def test_fast_dev_run_and_checkpoint_round_trip(tiny_featurized, tmp_path):
    db, data = tiny_featurized
    split = _split(data, db.manifest["tasks"])
    cfg = ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64)
    model = fit_transformer(data, split, cfg, TrainConfig(batch_size=4), fast_dev_run=True, progress=False)
    pred = LatencyPredictor(model, {}).predict_featurized(data)
    assert pred.dtype == np.float64 and pred.shape == (len(data),) and np.all(pred > 0)
    # the normalisation was fitted on the training programs' real labels
    assert model.label_mean.item() == pytest.approx(np.log(data.latency[split.train]).mean(), rel=1e-5)
    save_checkpoint(model, tmp_path / "ckpt", {"holdout": None})
    loaded, meta = load_checkpoint(tmp_path / "ckpt")
    assert meta == {"holdout": None} and loaded.config == cfg
    np.testing.assert_array_equal(LatencyPredictor(loaded, {}).predict_featurized(data), pred)

def test_data_module_batches(tiny_featurized):
    _, data = tiny_featurized
    dm = ProgramDataModule(data, np.arange(len(data)), [], batch_size=3)
    b = next(iter(dm.train_dataloader()))
    assert b["x"].shape[0] == 3 and b["x"].shape[2] == data.x.shape[1]
    assert b["mask"].sum().item() == sum(int(data.ptr[i + 1] - data.ptr[i]) for i in b["index"].tolist())
    assert torch.allclose(b["y"], torch.from_numpy(np.log(data.latency[b["index"].numpy()])).float())

def test_corrupt_checkpoint_is_a_clear_error(tiny_featurized, tmp_path):
    from cdmpp.model import LatencyTransformer

    folder = save_checkpoint(LatencyTransformer(ModelConfig(d_model=32, n_heads=2)), tmp_path / "c")
    (folder / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(CheckpointError, match="corrupt checkpoint weights"):
        load_checkpoint(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt checkpoint config"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="has no"):
        load_checkpoint(tmp_path / "missing")
    other = save_checkpoint(LatencyTransformer(ModelConfig(d_model=32, n_heads=2)), tmp_path / "d")
    big = save_checkpoint(LatencyTransformer(ModelConfig(d_model=64, n_heads=2)), tmp_path / "e")
    (other / "model.safetensors").write_bytes((big / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint(other)

def test_cmd_term_sees_target_features_but_never_their_latencies(tiny_featurized):
    import dataclasses

    db, data = tiny_featurized
    split = _split(data, db.manifest["tasks"])
    target = np.arange(len(data))[-2:]
    split = dataclasses.replace(split, train=np.setdiff1d(split.train, target), val=np.setdiff1d(split.val, target))
    latency = data.latency.copy()
    latency[target] = np.nan  # a CMD target's latency must never be read
    blind = dataclasses.replace(data, latency=latency)
    dm = ProgramDataModule(blind, split.train, [], batch_size=3, target=target)
    b = next(iter(dm.train_dataloader()))
    assert b["target_x"].shape[0] == b["x"].shape[0] and b["target_mask"].any(1).all()
    assert "target_x" not in next(iter(ProgramDataModule(blind, [], [], split.train, 3, target=target).test_dataloader()))
    cfg = ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64)
    tc = TrainConfig(batch_size=4, epochs=2, cmd_weight=1.0)
    model = fit_transformer(blind, split, cfg, tc, use_wandb=False, progress=False, target=target)
    assert all(torch.all(torch.isfinite(p)) for p in model.parameters())
    assert np.all(np.isfinite(LatencyPredictor(model, {}).predict_featurized(blind)))
    plain = fit_transformer(blind, split, cfg, dataclasses.replace(tc, cmd_weight=0.0), use_wandb=False, progress=False)
    # the term changes what is learned
    assert not np.allclose(LatencyPredictor(model, {}).predict_featurized(blind),
                           LatencyPredictor(plain, {}).predict_featurized(blind))
    with pytest.raises(ValueError, match="target-domain programs"):
        fit_transformer(blind, split, cfg, tc, use_wandb=False, progress=False)

def test_history_holds_each_epochs_training_and_validation_loss(tiny_featurized):
    db, data = tiny_featurized
    split = _split(data, db.manifest["tasks"])
    assert len(split.val) > 0
    cfg = ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64)
    history: list = []
    fit_transformer(data, split, cfg, TrainConfig(batch_size=4, epochs=3), use_wandb=False, progress=False,
                    history=history)
    assert [h["epoch"] for h in history] == [1, 2, 3]
    assert all(np.isfinite(h["train_loss"]) and np.isfinite(h["val_loss"]) for h in history)
    assert len({h["val_loss"] for h in history}) > 1  # each epoch's own, not one value repeated

def test_a_resumed_run_ends_where_an_uninterrupted_one_does(tiny_featurized, tmp_path, monkeypatch):
    from cdmpp.errors import InputError
    from cdmpp.train.lightning import EpochHistory

    db, data = tiny_featurized
    split = _split(data, db.manifest["tasks"])
    cfg = ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64, dropout=0.2)
    tc = TrainConfig(batch_size=4, epochs=3)
    whole: list = []
    uninterrupted = fit_transformer(data, split, cfg, tc, use_wandb=False, progress=False, history=whole)

    def killed_in_the_third(self, trainer, module):  # a hard stop (no train-end hooks) after two epochs
        if trainer.current_epoch == 2:
            raise RuntimeError("killed")

    monkeypatch.setattr(EpochHistory, "on_train_epoch_start", killed_in_the_third, raising=False)
    folder = tmp_path / "resume"
    with pytest.raises(RuntimeError, match="killed"):
        fit_transformer(data, split, cfg, tc, use_wandb=False, progress=False, resume_dir=folder)
    monkeypatch.undo()
    assert (folder / "last.ckpt").exists() and len(list(folder.glob("*.ckpt"))) == 1
    with pytest.raises(InputError, match="another recipe or split"):
        fit_transformer(data, split, cfg, TrainConfig(batch_size=4, epochs=4), use_wandb=False, progress=False,
                        resume_dir=folder, resume=True)
    assert (folder / "last.ckpt").exists()  # a refused resume keeps the checkpoint
    resumed_history: list = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = fit_transformer(data, split, cfg, tc, use_wandb=False, progress=False, history=resumed_history,
                                  resume_dir=folder, resume=True)
    assert not [w for w in caught if "exists and is not empty" in str(w.message)]  # the folder is the run's own
    assert not folder.exists()  # every epoch ran
    assert [h["epoch"] for h in resumed_history] == [1, 2, 3]
    assert [h["train_loss"] for h in resumed_history] == [h["train_loss"] for h in whole]
    np.testing.assert_array_equal(LatencyPredictor(resumed, {}).predict_featurized(data),
                                  LatencyPredictor(uninterrupted, {}).predict_featurized(data))
