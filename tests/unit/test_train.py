import numpy as np
import pytest
import torch

from cdmpp.model import sinusoidal_encoding
from cdmpp.train.lightning import TrainConfig
from cdmpp.train.splits import holdout_network


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
    from cdmpp.train.samplers import TaskGroupBatchSampler

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
    from cdmpp.train.losses import pairwise_rank_loss

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
    from cdmpp.train.losses import central_moment_discrepancy as cmd

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

def test_length_pools_pad_less_and_serve_every_program_once():
    from cdmpp.train.samplers import LengthPoolBatchSampler

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


def test_a_saved_checkpoint_is_readable_by_others_as_the_umask_allows(tmp_path):
    import os
    import stat

    from cdmpp.checkpoint import load_checkpoint, save_checkpoint
    from cdmpp.model import LatencyTransformer, ModelConfig

    old = os.umask(0o022)
    try:
        folder = save_checkpoint(LatencyTransformer(ModelConfig(d_model=32, n_heads=2)), tmp_path / "c")
    finally:
        os.umask(old)
    for name in ("model.safetensors", "config.json"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o644, name  # safetensors alone writes 0600
    load_checkpoint(folder)
