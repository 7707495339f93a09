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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.npz"]  # written through a renamed temporary file
    cut = tmp_path / "cut.npz"
    cut.write_bytes((tmp_path / "f.npz").read_bytes()[:200])  # what a killed writer would have left
    with pytest.raises(ValueError, match="corrupt featurized-programs file"):
        FeaturizedPrograms.load(cut)
    both = FeaturizedPrograms.concat([data.subset(np.array([1])), data.subset(np.array([0]))])
    np.testing.assert_array_equal(with_loop_tokens(both).x, with_loop_tokens(data.subset(np.array([1, 0]))).x)
    with pytest.raises(InputError, match="without their loops"):
        with_loop_tokens(merged)
    with pytest.raises(InputError, match="programs"):
        merge_tokens(data.x, data.pos, data.ptr, data.loop_x, data.loop_pos, data.loop_ptr[:-1])

def test_tree_parents_recover_the_compact_ast_from_the_token_rows():
    import torch

    from cdmpp.featurize.batch import dense_programs
    from cdmpp.model import LatencyTransformer, ModelConfig, tree_parents

    trees = featurize_many([vector_add, matmul_relu])
    merged = with_loop_tokens(from_trees(trees, [1e-3, 2e-3], [0, 1], ["va", "mm"], [1.0, 2.0]))
    x, pos, mask = dense_programs(merged, np.arange(2))
    parent = tree_parents(x, mask)
    # each token's parent index, mapped back to node numbers, is the AST's node_parent (the root: -1)
    for k, tree in enumerate(trees):
        n = int(mask[k].sum())
        nodes = pos[k, :n].tolist()
        got = [nodes[p] if p >= 0 else 0 for p in parent[k, :n].tolist()]
        assert got == [int(tree.node_parent[i]) for i in nodes]
    assert (parent[~mask] == -1).all()
    with pytest.raises(InputError, match="needs loop_tokens"):
        ModelConfig(tree_attention=True, loop_tokens=False)
    # the bias starts at zero: the same weights predict the same with and without it
    torch.manual_seed(0)
    cfg = ModelConfig(feature_dim=x.shape[-1], trace_tokens=False, loop_tokens=True, dropout=0.0)
    plain = LatencyTransformer(cfg).eval()
    tree = LatencyTransformer(ModelConfig(**{**cfg.__dict__, "tree_attention": True})).eval()
    state = plain.state_dict()
    tree.load_state_dict({**state, "tree_bias": torch.zeros(2, cfg.n_heads)})
    with torch.no_grad():
        assert torch.allclose(plain(x, pos, mask), tree(x, pos, mask), atol=1e-5)
        tree.tree_bias.fill_(3.0)  # attention moves along the tree's edges: the output moves too
        assert (plain(x, pos, mask) - tree(x, pos, mask)).abs().max() > 1e-5
