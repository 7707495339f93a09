import warnings

import numpy as np
import pytest
import torch

from cdmpp.model import CheckpointError, ModelConfig, load_checkpoint, save_checkpoint, sinusoidal_encoding
from cdmpp.predictor import LatencyPredictor
from cdmpp.train.fit import fit_transformer
from cdmpp.train.lightning import ProgramDataModule, TrainConfig
from cdmpp.train.splits import holdout_network


def _split(data, manifest_tasks):
    return holdout_network(data.workload, data.workload_keys, {"tasks": manifest_tasks}, None, val_fraction=0.5)


def test_holdout_split_never_shares_a_workload():
    workload = np.array([0, 0, 1, 1, 2, 2, 3])
    keys = ["a", "b", "c", "d"]
    tasks = [
        {"network": "n1", "workload_key": "a"},
        {"network": "n1", "workload_key": "b"},
        {"network": "n2", "workload_key": "b"},  # b occurs in both networks
        {"network": "n2", "workload_key": "c"},
        {"network": "n3", "workload_key": "d"},
    ]
    s = holdout_network(workload, keys, {"tasks": tasks}, "n2", val_fraction=0.5)
    assert sorted(s.test.tolist()) == [2, 3, 4, 5]  # b and c are held out, also b's n1 occurrence
    assert set(workload[np.concatenate([s.train, s.val])]) == {0, 3}
    with pytest.raises(ValueError, match="not in this dataset"):
        holdout_network(workload, keys, {"tasks": tasks}, "resnet")


def test_sinusoidal_encoding():
    pe = sinusoidal_encoding(torch.tensor([0, 3]), 8)
    assert pe.shape == (2, 8)
    assert pe[0].tolist() == [0, 1, 0, 1, 0, 1, 0, 1]
    assert pe[1, 0].item() == pytest.approx(np.sin(3.0))


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


def test_top_k_score_and_flops_baseline():
    from cdmpp.train.baselines import FlopsBaseline, NotFittedError
    from cdmpp.train.metrics import summary, top_k_score

    true = np.array([1.0, 2.0, 3.0, 10.0, 20.0])
    groups = np.array([0, 0, 0, 1, 1])
    pred = np.array([3.0, 2.0, 1.0, 10.0, 20.0])  # task 0 ranked backwards
    assert top_k_score(pred, true, groups, None, 1) == pytest.approx((1 + 10) / (3 + 10))
    assert top_k_score(pred, true, groups, {0: 3.0, 1: 1.0}, 1) == pytest.approx((3 + 10) / (9 + 10))
    assert top_k_score(pred, true, groups, None, 5) == 1.0
    row = summary(true * 1.05, true, groups)
    assert row["mape"] == pytest.approx(0.05) and row["within_10"] == 1.0 and row["top1"] == 1.0
    with pytest.raises(NotFittedError):
        FlopsBaseline().predict(np.ones(2))
    b = FlopsBaseline().fit(np.array([100.0, 100.0, 0.0]), np.array([1.0, 2.0, 0.5]))
    assert b.throughput_ == 100.0 and b.predict(np.array([300.0, 0.0])).tolist() == [3.0, 0.5]


def test_task_group_batches_cover_every_program_once_in_same_task_runs():
    from cdmpp.train.lightning import TaskGroupBatchSampler

    index = np.arange(100, 137)
    workload = np.repeat([3, 1, 4, 1, 5], [10, 5, 9, 5, 8])  # task 1 occurs twice: 10 programs
    sampler = TaskGroupBatchSampler(index, workload, batch_size=8, group=4, seed=0)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 5 and all(len(b) == 8 for b in batches[:-1])
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == index.tolist()
    task = dict(zip(index.tolist(), workload.tolist()))
    # laid end to end, the order changes task at most once per group of 4
    changes = sum(task[a] != task[b] for a, b in zip(flat[:-1], flat[1:]))
    assert changes <= -(-10 // 4) + -(-9 // 4) + -(-8 // 4) + -(-10 // 4)
    # 20 tasks of 8 programs, groups of 8, batches of 16: every batch is two whole tasks
    # (a free shuffle would put about 11 tasks in each)
    wl = np.repeat(np.arange(20), 8)
    for b in TaskGroupBatchSampler(np.arange(160), wl, batch_size=16, group=8, seed=1):
        assert len(b) == 16 and len(set(wl[b].tolist())) == 2
    again = [b for b in TaskGroupBatchSampler(index, workload, batch_size=8, group=4, seed=0)]
    assert again == batches


def test_pairwise_rank_loss_rewards_the_right_order_within_tasks_only():
    from cdmpp.train.lightning import pairwise_rank_loss

    target = torch.tensor([0.0, 1.0, 2.0, 5.0, 6.0])
    group = torch.tensor([0, 0, 0, 1, 1])
    right, wrong = pairwise_rank_loss(target, target, group), pairwise_rank_loss(-target, target, group)
    assert right < np.log(2) < wrong  # log 2 is the loss of a constant prediction
    # a pair of different tasks is never compared: swapping the two tasks' levels changes nothing
    shifted = target.clone()
    shifted[3:] -= 100
    assert pairwise_rank_loss(shifted, target, group) == pytest.approx(right.item())
    # pairs within the margin are ignored; no pair left gives 0
    assert pairwise_rank_loss(target, target, torch.arange(5)).item() == 0.0
    assert pairwise_rank_loss(-target, target, group, margin=1.5).item() == pytest.approx(
        pairwise_rank_loss(-target[[0, 2]], target[[0, 2]], group[[0, 2]]).item()
    )
    with pytest.raises(ValueError, match="rank_weight"):
        TrainConfig(rank_weight=-1)


def test_central_moment_discrepancy_matches_the_moments_it_is_asked_to():
    from cdmpp.train.lightning import central_moment_discrepancy as cmd

    a = torch.randn(500, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert cmd(a, a).item() == 0.0
    # a shift moves the mean only: every central moment stays, so CMD is the shift's norm
    shift = torch.tensor([3.0, 0.0, 4.0, 0.0], dtype=torch.float64)
    assert cmd(a, a + shift, moments=1).item() == pytest.approx(5.0, rel=1e-9)
    assert cmd(a, a + shift, moments=5).item() == pytest.approx(5.0, rel=1e-9)
    # doubling a centred sample keeps the mean; the second central moment grows by 3x the variance
    c = a - a.mean(0)
    var = c.pow(2).mean(0)
    assert cmd(c, 2 * c, moments=1).item() == pytest.approx(0.0, abs=1e-12)
    assert cmd(c, 2 * c, moments=2).item() == pytest.approx(torch.linalg.vector_norm(3 * var).item(), rel=1e-9)
    src = a.clone().requires_grad_(True)
    cmd(src, a + shift).backward()
    assert src.grad is not None and torch.all(torch.isfinite(src.grad)) and src.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="samples"):
        cmd(a, a[:, :3])
    with pytest.raises(ValueError, match="non-empty"):
        cmd(a, a[:0])
    with pytest.raises(ValueError, match="cmd_weight"):
        TrainConfig(cmd_weight=-0.5)
    with pytest.raises(ValueError, match="cmd_moments"):
        TrainConfig(cmd_moments=0)


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


def test_thin_training_keeps_a_share_of_each_task_and_leaves_validation_and_test():
    from cdmpp.errors import InputError
    from cdmpp.train.lightning import TrainConfig
    from cdmpp.train.splits import Split, thin_training

    workload = np.array([0] * 10 + [1] * 4 + [2] + [0, 1])
    split = Split(np.arange(15), np.array([15]), np.array([16]), "net")
    thin = thin_training(split, workload, 0.5, seed=3)
    assert np.bincount(workload[thin.train], minlength=3).tolist() == [5, 2, 1]  # at least one of a task of one
    assert set(thin.train) <= set(split.train) and np.all(np.diff(thin.train) > 0)
    assert thin.val.tolist() == [15] and thin.test.tolist() == [16]
    assert thin_training(split, workload, 1.0) is split
    with pytest.raises(InputError, match="train_share must be in"):
        TrainConfig(train_share=0)


def test_train_data_rejects_options_that_do_not_fit_the_data(tmp_path):
    from cdmpp.errors import InputError
    from cdmpp.train.config import TrainData

    with pytest.raises(InputError, match="no dataset"):
        TrainData([])
    with pytest.raises(InputError, match="split must be one of"):
        TrainData([tmp_path], split="random")
    with pytest.raises(InputError, match="holds out a network"):
        TrainData([tmp_path], split="cdmpp")
    assert TrainData(tmp_path, holdout="none").holdout is None and TrainData(tmp_path).datasets == [tmp_path]
    with pytest.raises(InputError, match="one device folder"):
        TrainData([tmp_path], pool=[tmp_path / "other"]).check(several=True)
    with pytest.raises(InputError, match="several device folders"):
        TrainData([tmp_path], exclude_devices=("cpu-x",)).check(several=False)
    with pytest.raises(InputError, match="several device folders"):
        TrainData([tmp_path], split="within-task").check(several=False)
    TrainData([tmp_path], split="within-task").check(several=True)  # fits: no error


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


def test_length_pools_pad_less_and_serve_every_program_once():
    from cdmpp.train.lightning import LengthPoolBatchSampler

    rng = np.random.default_rng(0)
    index = np.arange(5, 1005)
    lengths = rng.integers(1, 40, len(index))
    token_count = dict(zip(index.tolist(), lengths.tolist()))

    def padded(batches):  # tokens after padding each batch to its longest program
        return sum(max(token_count[i] for i in b) * len(b) for b in batches)

    sampler = LengthPoolBatchSampler(index, lengths, 16, 10, torch.Generator().manual_seed(3))
    first, second = list(sampler), list(sampler)
    assert len(first) == len(sampler) == 63  # 6 pools of 10 batches, then 40 programs in 3 batches
    for epoch in (first, second):
        assert sorted(i for b in epoch for i in b) == index.tolist()
    assert first != second  # each epoch draws anew
    assert list(LengthPoolBatchSampler(index, lengths, 16, 10, torch.Generator().manual_seed(3))) == first
    shuffled = [index[rng.permutation(len(index))][s : s + 16].tolist() for s in range(0, len(index), 16)]
    assert padded(first) < 0.8 * padded(shuffled)
    from cdmpp.errors import InputError

    with pytest.raises(InputError, match="length_pool"):
        TrainConfig(length_pool=10, task_group=16)
