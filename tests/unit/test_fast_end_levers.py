"""The fast-end levers: the within-task ListMLE term, the roofline-bounded level and message
passing along the compact AST (fast layer: synthetic rows, no program is built or timed)."""

import math

import numpy as np
import pytest
import torch

from cdmpp.errors import InputError
from cdmpp.featurize import FEATURE_DIM
from cdmpp.featurize.access import ACCESS_FEATURE_NAMES
from cdmpp.featurize.ast import OWN_FEATURES


def test_listmle_scores_the_order_within_each_task_and_weighs_the_fast_end_most():
    from cdmpp.train.losses import listmle_loss

    target = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.0, 5.0])  # task 0: four programs, fastest first; task 1: two
    group = torch.tensor([0, 0, 0, 0, 1, 1])
    right = listmle_loss(target * 2, target, group)
    reversed_order = listmle_loss(-target, target, group)
    assert right < reversed_order
    # a constant per task changes nothing: the term leaves the level to the level loss
    shifted = target * 2 + torch.tensor([5.0, 5.0, 5.0, 5.0, -3.0, -3.0])
    assert listmle_loss(shifted, target, group) == pytest.approx(float(right), rel=1e-5)
    # swapping the two fastest costs more than swapping the two slowest
    fast_swap = torch.tensor([1.0, 0.0, 2.0, 3.0, 0.0, 5.0]) * 2
    slow_swap = torch.tensor([0.0, 1.0, 3.0, 2.0, 0.0, 5.0]) * 2
    assert listmle_loss(fast_swap, target, group) > listmle_loss(slow_swap, target, group)
    # no task with two programs: 0, with a gradient graph
    alone = torch.tensor([1.0, 2.0], requires_grad=True)
    zero = listmle_loss(alone, torch.tensor([1.0, 2.0]), torch.tensor([0, 1]))
    assert float(zero.detach()) == 0.0 and zero.requires_grad


def test_listmle_needs_task_groups():
    from cdmpp.train.config import TrainConfig

    with pytest.raises(InputError, match="listmle_weight"):
        TrainConfig(listmle_weight=1.0)
    assert TrainConfig(listmle_weight=1.0, task_group=16).listmle_weight == 1.0


def test_a_model_card_names_the_listmle_term_and_its_weight():
    from dataclasses import asdict

    from cdmpp.train.config import TrainConfig, describe_loss

    plain = describe_loss(asdict(TrainConfig()))
    ranked = describe_loss(asdict(TrainConfig(listmle_weight=0.03, task_group=16)))
    assert "ListMLE" not in plain
    assert ranked.startswith(plain) and "0.03 x a within-task listwise ranking term (position-weighted ListMLE" in ranked
    assert "up to 16 same-task programs" in ranked


def _leaf_row(iterations: float, adds: float, muls: float, unique_bytes: list[float]) -> np.ndarray:
    row = np.zeros(FEATURE_DIM, np.float32)
    row[OWN_FEATURES.index("iterations")] = math.log2(1 + iterations)
    row[OWN_FEATURES.index("add_sub")] = math.log2(1 + adds)
    row[OWN_FEATURES.index("mul")] = math.log2(1 + muls)
    for b, nbytes in enumerate(unique_bytes):
        row[len(OWN_FEATURES) + b * len(ACCESS_FEATURE_NAMES) + ACCESS_FEATURE_NAMES.index("unique_bytes")] = \
            math.log2(1 + nbytes)
    return row


def test_the_roofline_bound_counts_flops_and_bytes_and_never_undercuts_the_overhead():
    from cdmpp.device import local_cpu
    from cdmpp.roofline import RooflineBound, base_log_rates, program_work

    # a 256^3 matmul's update (one add, one mul per iteration over 3 buffers) and an elementwise leaf
    mm = _leaf_row(256**3, 1, 1, [256 * 256 * 4] * 3)
    ew = _leaf_row(1024, 1, 0, [4096, 4096])
    x = torch.from_numpy(np.stack([np.stack([mm, ew]), np.stack([ew, np.zeros(FEATURE_DIM, np.float32)])]))
    mask = torch.tensor([[True, True], [True, False]])
    flops, nbytes = program_work(x, mask)
    np.testing.assert_allclose(flops.numpy(), [2 * 256**3 + 1024, 1024], rtol=1e-4)
    np.testing.assert_allclose(nbytes.numpy(), [3 * 256 * 256 * 4 + 2 * 4096, 2 * 4096], rtol=1e-4)
    from cdmpp.device import descriptor_vector

    desc = torch.from_numpy(np.stack([descriptor_vector(local_cpu())] * 2))
    with torch.no_grad():
        bound = RooflineBound(rows=1)(x, mask, desc, None)
    rates = base_log_rates(desc, 2)
    assert torch.all(bound >= rates[:, 2] - 1e-6)  # at least the overhead
    assert bound[0] > bound[1] + 3.0  # the matmul's bound is far above the small elementwise program's
    expected = math.log(math.exp(float(rates[0, 2])) + 2 * 256**3 / math.exp(float(rates[0, 0]))
                        + (3 * 256 * 256 * 4 + 8192) / math.exp(float(rates[0, 1])))
    assert float(bound[0]) == pytest.approx(expected, abs=1e-3)


def test_a_roofline_model_never_predicts_below_its_bound_and_learns_a_new_device():
    from cdmpp.model import LatencyTransformer, ModelConfig

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=1, ff_dim=32, trace_tokens=False, loop_tokens=False,
                      num_devices=2, roofline=True)
    m = LatencyTransformer(cfg).eval()
    m.label_mean.fill_(-9.0)
    m.label_std.fill_(2.0)
    x = torch.from_numpy(np.stack([np.stack([_leaf_row(2**20, 1, 1, [2**22] * 3)] * 3)] * 4)) + 0.0
    x[1:, :, 0] = torch.rand(3, 3) * 4  # other depths: the encoder sees different programs
    pos = torch.arange(3).expand(4, 3)
    mask = torch.ones(4, 3, dtype=torch.bool)
    rows = torch.tensor([1, 2, 1, 2])
    with torch.no_grad():
        torch.nn.init.normal_(m.head[-1].weight, std=3.0)  # inefficiencies far below and above 0 before softplus
        bound = m.roofline_bound(x, mask, rows)
        got = m.predict_log_latency(x, pos, mask, rows)
    assert torch.all(got >= bound - 1e-5)
    with pytest.raises(InputError, match="raw token rows"):
        m.output(m.encoded(x, pos, mask), mask, rows)
    row = m.add_device(m.device_descriptor[1].numpy(), init_row=1)
    assert row == 3 and m.roofline.correction.shape == (4, 3)
    with torch.no_grad():
        np.testing.assert_allclose(m.roofline_bound(x, mask, torch.full((4,), 3)).numpy(),
                                   m.roofline_bound(x, mask, torch.full((4,), 1)).numpy(), rtol=1e-6)


def test_roofline_and_tree_gnn_models_save_and_load(tmp_path):
    from cdmpp.checkpoint import load_checkpoint, save_checkpoint
    from cdmpp.model import LatencyTransformer, ModelConfig

    torch.manual_seed(0)
    x, pos, mask = _tree_batch()
    cfg = ModelConfig(feature_dim=x.shape[-1], d_model=16, n_heads=2, n_layers=1, ff_dim=32, trace_tokens=False,
                      loop_tokens=True, tree_gnn=1, roofline=True)
    m = LatencyTransformer(cfg).eval()
    with torch.no_grad():
        before = m.predict_log_latency(x, pos, mask)
    save_checkpoint(m, tmp_path / "ckpt", {})
    loaded, _ = load_checkpoint(tmp_path / "ckpt")
    with torch.no_grad():
        np.testing.assert_allclose(loaded.predict_log_latency(x, pos, mask).numpy(), before.numpy(), rtol=1e-5)
    assert loaded.config.tree_gnn == 1 and loaded.config.roofline
    with pytest.raises(InputError, match="tree_gnn needs loop_tokens"):
        ModelConfig(loop_tokens=False, trace_tokens=False, tree_gnn=2)


def _tree_batch():
    """Two loop-token programs: ``for i: {leaf; for j: leaf}`` and ``for i: leaf`` (padded)."""
    from cdmpp.encoder import LOOP_DEPTH
    from cdmpp.featurize.loops import LOOP_DIM

    width = FEATURE_DIM + LOOP_DIM + 1

    def loop(depth):
        r = np.zeros(width, np.float32)
        r[FEATURE_DIM + LOOP_DEPTH] = depth
        r[-1] = 1.0
        return r

    def leaf(depth, iters):
        r = np.zeros(width, np.float32)
        r[:FEATURE_DIM] = _leaf_row(iters, 1, 1, [4 * iters])
        r[0] = depth
        return r

    a = [loop(0), leaf(1, 64), loop(1), leaf(2, 4096)]
    b = [loop(0), leaf(1, 128), np.zeros(width, np.float32), np.zeros(width, np.float32)]
    x = torch.from_numpy(np.stack([np.stack(a), np.stack(b)]))
    mask = torch.tensor([[True] * 4, [True, True, False, False]])
    return x, torch.arange(4).expand(2, 4), mask


def test_tree_edges_follow_the_compact_ast_and_the_gnn_leaves_padding_and_batch_mates_alone():
    from cdmpp.model import LatencyTransformer, ModelConfig
    from cdmpp.tree_gnn import tree_edges

    x, pos, mask = _tree_batch()
    edges = tree_edges(x, mask).numpy()
    # real tokens numbered 0-3 (first program) and 4-5 (second): child -> parent, then back
    pairs = set(zip(edges[0].tolist(), edges[1].tolist()))
    assert pairs == {(1, 0), (2, 0), (3, 2), (5, 4), (0, 1), (0, 2), (2, 3), (4, 5)}
    torch.manual_seed(0)
    m = LatencyTransformer(ModelConfig(feature_dim=x.shape[-1], d_model=16, n_heads=2, n_layers=1, ff_dim=32,
                                       trace_tokens=False, loop_tokens=True, tree_gnn=2)).eval()
    with torch.no_grad():
        both = m.predict_log_latency(x, pos, mask)
        alone = m.predict_log_latency(x[1:, :2], pos[1:, :2], mask[1:, :2])
        plain = LatencyTransformer(ModelConfig(feature_dim=x.shape[-1], d_model=16, n_heads=2, n_layers=1, ff_dim=32,
                                               trace_tokens=False, loop_tokens=True))
        plain.load_state_dict({k: v for k, v in m.state_dict().items() if not k.startswith("tree_gnn.")})
        without = plain.eval().predict_log_latency(x, pos, mask)
    np.testing.assert_allclose(alone.numpy(), both[1:].numpy(), rtol=1e-5)
    assert not np.allclose(both.numpy(), without.numpy())  # the messages change the tokens


def test_the_new_flags_reach_the_configs():
    from cdmpp.cli import build_parser
    from cdmpp.recipe_args import model_configs

    args = build_parser().parse_args(["train", "-d", "x", "-o", "y", "--roofline", "--tree-gnn", "2",
                                      "--listmle-weight", "0.5", "--task-group", "16"])
    model, train = model_configs(args)
    assert model.roofline and model.tree_gnn == 2 and train.listmle_weight == 0.5
    default_model, default_train = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y"]))
    assert not default_model.roofline and default_model.tree_gnn == 0 and default_train.listmle_weight == 0.0


def test_one_training_step_of_every_fast_end_lever_reaches_its_new_weights():
    """The Lightning module's loss with the roofline level, the ListMLE term and the tree
    GNN together: finite, and its gradient reaches the roofline corrections, the GATv2
    layers and the encoder."""
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig
    from cdmpp.train.lightning import LatencyModule

    x, pos, mask = _tree_batch()
    x = torch.cat([x, x])
    pos, mask = torch.cat([pos, pos]), torch.cat([mask, mask])
    torch.manual_seed(0)
    module = LatencyModule(
        ModelConfig(feature_dim=x.shape[-1], d_model=16, n_heads=2, n_layers=1, ff_dim=32, trace_tokens=False,
                    loop_tokens=True, tree_gnn=1, roofline=True, num_devices=1),
        TrainConfig(task_group=2, listmle_weight=1.0, device_dropout=0.0),
    )
    batch = {"x": x, "pos": pos, "mask": mask, "y": torch.tensor([-9.0, -11.0, -8.5, -10.0]),
             "workload": torch.tensor([0, 0, 1, 1]), "device_row": torch.tensor([1, 1, 1, 1])}
    module.log = lambda *a, **k: None  # no trainer attached
    loss = module.shared_step(batch, "train")
    loss.backward()
    assert torch.isfinite(loss)
    m = module.model
    assert m.roofline.correction.grad is not None and m.roofline.correction.grad[1].abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.tree_gnn.parameters())
    assert m.embed[0].weight.grad.abs().sum() > 0


def test_cache_fit_features_compare_a_leaf_with_its_devices_caches_isa_and_cores():
    from cdmpp.cache_fit import FIT_DIM, cache_fit_features
    from cdmpp.device import DESCRIPTOR_FEATURES

    def leaf(reuse_bytes, vector_extent, parallel_extent):
        row = _leaf_row(4096, 1, 1, [reuse_bytes, 64])
        row[OWN_FEATURES.index("program_leaves")] = 1.0
        row[OWN_FEATURES.index("dtype_bits")] = 32.0
        row[OWN_FEATURES.index("extent_vectorized")] = math.log2(vector_extent) if vector_extent > 1 else 0.0
        row[OWN_FEATURES.index("extent_parallel")] = math.log2(parallel_extent) if parallel_extent > 1 else 0.0
        col = len(OWN_FEATURES) + ACCESS_FEATURE_NAMES.index("reuse_distance_bytes")
        row[col] = math.log2(1 + reuse_bytes)
        return row

    x = torch.from_numpy(np.stack([np.stack([leaf(16 * 1024, 16, 2), leaf(8 * 1024**2, 4, 64),
                                             np.zeros(FEATURE_DIM, np.float32)])]))
    caches = torch.log2(torch.tensor([[48 * 1024, 2 * 1024**2, 32 * 1024**2]], dtype=torch.float32))
    desc = torch.zeros(1, len(DESCRIPTOR_FEATURES))
    desc[0, DESCRIPTOR_FEATURES.index("kind_cpu")] = 1
    desc[0, DESCRIPTOR_FEATURES.index("isa_avx512")] = 1
    desc[0, DESCRIPTOR_FEATURES.index("log2_cores")] = 1  # 2 cores
    f = cache_fit_features(x, caches, desc)
    assert f.shape == (1, 3, FIT_DIM)
    small, large = f[0, 0], f[0, 1]
    assert small[0] < 0 and small[1] < 0 and small[2] < 0  # 16 KB fits in L1, L2 and L3
    assert large[0] > 0 and large[1] > 0 and large[2] < 0  # 8 MB spills L1 and L2, fits L3
    assert float(small[-2]) == pytest.approx(0.0, abs=1e-5)  # 16 fp32 lanes fill AVX-512
    assert small[-1] == 0 and large[-1] > 0  # 2 parallel iterations on 2 cores; 64 on 2
    assert torch.all(f[0, 2] == 0)  # no leaf (padding, a loop or trace token): zeros


def test_a_cache_fit_model_starts_as_the_plain_one_and_then_reads_the_devices_caches(tmp_path):
    from cdmpp.checkpoint import load_checkpoint, save_checkpoint
    from cdmpp.device import DeviceDescriptor, device_caches
    from cdmpp.model import LatencyTransformer, ModelConfig

    torch.manual_seed(0)
    base = dict(d_model=16, n_heads=2, n_layers=1, ff_dim=32, trace_tokens=False, loop_tokens=False, num_devices=2)
    fit = LatencyTransformer(ModelConfig(**base, cache_fit=True)).eval()
    plain = LatencyTransformer(ModelConfig(**base)).eval()
    plain.load_state_dict({k: v for k, v in fit.state_dict().items() if not k.startswith(("fit_proj", "device_caches"))})
    x = torch.from_numpy(np.stack([np.stack([_leaf_row(2**16, 1, 1, [2**20, 2**12])] * 2)] * 2))
    x[..., OWN_FEATURES.index("program_leaves")] = 1.0
    x[..., len(OWN_FEATURES) + ACCESS_FEATURE_NAMES.index("reuse_distance_bytes")] = 20.0  # 1 MB between reuses
    pos, mask, rows = torch.arange(2).expand(2, 2), torch.ones(2, 2, dtype=torch.bool), torch.tensor([1, 2])
    with torch.no_grad():
        np.testing.assert_allclose(fit.predict_log_latency(x, pos, mask, rows).numpy(),
                                   plain.predict_log_latency(x, pos, mask, rows).numpy(), rtol=1e-6)
        torch.nn.init.normal_(fit.fit_proj.weight, std=1.0)
        fit.set_device_caches([[32 * 1024, 1024**2, 32 * 1024**2], [32 * 1024, 512 * 1024, 16 * 1024**2],
                               [48 * 1024, 2 * 1024**2, 320 * 1024**2]])
        fit.device_descriptor[2] = fit.device_descriptor[1]  # two devices that differ only in their caches
        out = fit.predict_log_latency(x[:1].expand(2, -1, -1), pos, mask, rows)
    assert abs(float(out[0] - out[1])) > 1e-4
    save_checkpoint(fit, tmp_path / "ckpt", {})
    loaded, _ = load_checkpoint(tmp_path / "ckpt")
    torch.testing.assert_close(loaded.device_caches, fit.device_caches)
    row = loaded.add_device(np.zeros(loaded.config.descriptor_dim, np.float32), 0, (48 * 1024, 1024**2, 32 * 1024**2))
    assert loaded.device_caches.shape == (4, 3) and float(loaded.device_caches[row, 0]) == pytest.approx(math.log2(48 * 1024))
    old = DeviceDescriptor.from_json({"device_id": "cpu-amd_epyc-znver4-avx512", "kind": "cpu", "model": "AMD EPYC",
                                      "cores": 2, "isa": "avx512", "target": {"kind": "llvm", "mcpu": "znver4"}})
    assert old.caches == () and device_caches(old) == (32 * 1024, 1024**2, 32 * 1024**2)
    assert "caches" not in old.to_json() and DeviceDescriptor.from_json(old.to_json()) == old


def test_this_machine_records_its_caches():
    """A CPU measured here carries the cache sizes /sys reports (where it reports them), and
    they survive the descriptor's JSON; a CPU described from given info has none."""
    from pathlib import Path

    from cdmpp.device import DeviceDescriptor, host_caches, local_cpu

    here = local_cpu()
    if Path("/sys/devices/system/cpu/cpu0/cache/index0").exists():
        assert len(here.caches) == 3 and here.caches[0] < here.caches[1] <= here.caches[2]
    assert DeviceDescriptor.from_json(here.to_json()) == here
    assert local_cpu(cpu_info=("AMD EPYC 9R14", {"avx2"})).caches == ()
    assert host_caches() == here.caches


def test_fast_end_weights_mark_each_tasks_fastest_tenth_of_its_training_programs():
    from cdmpp.train.fit import fast_end_weights

    # task 0: 20 training programs (2 marked); task 1: 3 (at least one marked); program 23
    # (task 1, the fastest of all) is not a training program and is never weighted
    workload = np.array([0] * 20 + [1] * 4)
    latency = np.array([float(20 - i) for i in range(20)] + [5.0, 4.0, 6.0, 0.5])
    train = np.arange(23)
    w = fast_end_weights(workload, latency, train, fast_weight=4.0)
    assert w.dtype == np.float32 and w.shape == (24,)
    assert np.flatnonzero(w == 5.0).tolist() == [18, 19, 21]  # latencies 2, 1 of task 0; 4 of task 1
    assert np.all(w[[i for i in range(24) if i not in (18, 19, 21)]] == 1.0)
    assert np.all(fast_end_weights(workload, latency, train, fast_weight=0.0) == 1.0)


def test_the_fast_weight_weighs_the_level_loss_in_training_only():
    """A batch whose fastest program weighs 5 times: the training loss is the weighted mean
    of the per-program Huber terms; validation's stays the plain mean."""
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig
    from cdmpp.train.lightning import LatencyModule

    x, pos, mask = _tree_batch()
    torch.manual_seed(0)
    module = LatencyModule(
        ModelConfig(feature_dim=x.shape[-1], d_model=16, n_heads=2, n_layers=1, ff_dim=32, trace_tokens=False,
                    loop_tokens=True, dropout=0.0),
        TrainConfig(fast_weight=4.0, device_dropout=0.0),
    )
    module.log = lambda *a, **k: None  # no trainer attached
    y = torch.tensor([-9.0, -11.0])
    batch = {"x": x, "pos": pos, "mask": mask, "y": y, "workload": torch.tensor([0, 0])}
    with torch.no_grad():
        pred = module.model.output(module.model.encoded(x, pos, mask), mask, x=x)
        per = torch.nn.functional.huber_loss(pred, (y - module.model.label_mean) / module.model.label_std,
                                             delta=0.1, reduction="none")
        plain = module.shared_step(batch, "validation")
        weighted = module.shared_step({**batch, "level_weight": torch.tensor([1.0, 5.0])}, "train")
    assert float(per[0]) != pytest.approx(float(per[1]), rel=1e-3)  # the weights can tell
    assert float(plain) == pytest.approx(float(per.mean()), rel=1e-5)
    assert float(weighted) == pytest.approx(float((per[0] + 5 * per[1]) / 6), rel=1e-5)
    with pytest.raises(InputError, match="fast_weight"):
        TrainConfig(fast_weight=-1.0)


def test_the_fast_weight_reaches_the_config_and_the_model_card():
    from dataclasses import asdict

    from cdmpp.cli import build_parser
    from cdmpp.recipe_args import model_configs
    from cdmpp.train.config import TrainConfig, describe_loss

    _, train = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y", "--fast-weight", "4"]))
    assert train.fast_weight == 4.0
    assert "fastest tenth of training programs weighted 5 times" in describe_loss(asdict(train))
    assert "fastest tenth" not in describe_loss(asdict(TrainConfig()))


def test_workload_weights_make_every_task_count_alike_in_the_level():
    """At power 1 an untunable task's one program weighs as much as a tunable task's whole
    set; at 0 every program weighs 1; programs outside training keep weight 1."""
    from cdmpp.train.config import TrainConfig
    from cdmpp.train.fit import workload_weights

    workload = np.array([0] * 8 + [1] + [2] * 4 + [3])
    train = np.arange(13)  # program 13 (task 3) is not a training program
    w = workload_weights(workload, train, power=1.0)
    per_task = [w[:13][workload[:13] == k].sum() for k in range(3)]
    assert np.allclose(per_task, per_task[0]) and w[13] == 1.0
    assert abs(w[train].mean() - 1.0) < 1e-6 and w[8] > w[0] * 7.9  # the single program outweighs one of eight
    half = workload_weights(workload, train, power=0.5)
    assert w[8] / w[0] > half[8] / half[0] > 1.0
    assert np.all(workload_weights(workload, train, power=0.0) == 1.0)
    with pytest.raises(Exception, match="workload_weight"):
        TrainConfig(workload_weight=1.5)
