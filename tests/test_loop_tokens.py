"""Loop tokens: every loop of the compact AST as a token among the leaves, in pre-order."""

import numpy as np
import pytest
from programs import matmul_relu, vector_add

from cdmpp.errors import InputError
from cdmpp.featurize import FEATURE_DIM, featurize_many
from cdmpp.featurize.batch import FeaturizedPrograms, from_trees
from cdmpp.featurize.loops import LOOP_DIM, LOOP_FEATURES, loop_rows, merge_tokens, with_loop_tokens

COL = {name: i for i, name in enumerate(LOOP_FEATURES)}


def test_loop_rows_describe_each_loop_of_a_hand_worked_tree():
    # matmul_relu: 0 root -> 1 i(16) -> 2 j(16) -> 3 unrolled k(16) -> 4, 5 leaves C; 6 i(16) -> 7 j(16) -> 8 leaf D
    (va, mm) = featurize_many([vector_add, matmul_relu])
    rows, pos = loop_rows(mm)
    assert rows.shape == (5, LOOP_DIM) and pos.tolist() == [1, 2, 3, 6, 7]
    assert rows[:, COL["extent"]].tolist() == pytest.approx([np.log2(17)] * 5)
    assert rows[:, COL["depth"]].tolist() == [0, 1, 2, 0, 1]
    assert rows[2, COL["kind_unrolled"]] == 1 and rows[0, COL["kind_serial"]] == 1
    assert rows[:, COL["outer_iterations"]].tolist() == pytest.approx([0, 4, 8, 0, 4])
    assert rows[:, COL["body_iterations"]].tolist() == pytest.approx([12, 8, 4, 8, 4])
    assert rows[:, COL["leaves_below"]].tolist() == pytest.approx(np.log2([3, 3, 3, 2, 2]).tolist())
    assert rows[:, COL["innermost"]].tolist() == [0, 0, 1, 0, 1]
    # vector_add: the extent-1 loop is dropped; parallel(64) -> vectorized(32)
    rows, pos = loop_rows(va)
    assert pos.tolist() == [1, 2] and rows[0, COL["kind_parallel"]] == 1 and rows[1, COL["kind_vectorized"]] == 1


def test_merged_tokens_follow_the_pre_order_and_survive_the_cache(tmp_path):
    trees = featurize_many([vector_add, matmul_relu])
    data = from_trees(trees, [1e-3, 2e-3], [0, 1], ["va", "mm"], [1.0, 2.0])
    assert data.has_loops and data.loop_ptr.tolist() == [0, 2, 7]
    merged = with_loop_tokens(data)
    assert merged.x.shape == (data.x.shape[0] + 7, FEATURE_DIM + LOOP_DIM + 1) and not merged.has_loops
    assert merged.ptr.tolist() == [0, 3, 3 + 8]
    assert merged.pos[3:].tolist() == list(range(1, 9))  # matmul_relu: every node but the root, in pre-order
    flags = merged.x[3:, -1]
    assert flags.tolist() == [1, 1, 1, 0, 0, 1, 1, 0]
    np.testing.assert_array_equal(merged.x[3:][flags == 0, :FEATURE_DIM], data.x[1:])  # the leaves, unchanged
    # the loops are saved and loaded, and follow subset and concat
    data.save(tmp_path / "f.npz")
    again = FeaturizedPrograms.load(tmp_path / "f.npz")
    assert again.has_loops and np.array_equal(again.loop_x, data.loop_x)
    both = FeaturizedPrograms.concat([data.subset(np.array([1])), data.subset(np.array([0]))])
    np.testing.assert_array_equal(with_loop_tokens(both).x, with_loop_tokens(data.subset(np.array([1, 0]))).x)
    with pytest.raises(InputError, match="without their loops"):
        with_loop_tokens(merged)
    with pytest.raises(InputError, match="programs"):
        merge_tokens(data.x, data.pos, data.ptr, data.loop_x, data.loop_pos, data.loop_ptr[:-1])


def test_train_and_predict_with_loop_tokens(tiny_collection, tmp_path):
    from cdmpp import dataset as ds
    from cdmpp.cli import main
    from cdmpp.model import load_checkpoint
    from cdmpp.predictor import LatencyPredictor

    _, summary = tiny_collection
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb", "--epochs", "1",
            "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--loop-tokens"]
    assert main(args) == 0
    model, _ = load_checkpoint(out)
    assert model.config.loop_tokens and model.config.feature_dim > FEATURE_DIM + LOOP_DIM
    db = ds.load_device_dir(summary.device_dir)
    records = [p.record for p in db.programs]
    pred = LatencyPredictor.load(out).predict(records)
    assert pred.shape == (len(records),) and np.all(np.isfinite(pred)) and np.all(pred > 0)
    assert main(["evaluate", "-c", str(out), "-d", str(summary.device_dir), "--holdout", "none",
                 "--cache", str(tmp_path / "c")]) == 0
