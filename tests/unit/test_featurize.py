from pathlib import Path

import numpy as np
import pytest
from programs import matmul_relu, vector_add, with_while
from support import count_featurized

from cdmpp.errors import InputError
from cdmpp.featurize import (
    FEATURE_DIM,
    LEAF,
    OWN_FEATURES,
    PSF_DIM,
    ROOT,
    UnsupportedProgramError,
    featurize,
    featurize_many,
)
from cdmpp.featurize.ast import PARALLEL, SERIAL, UNROLLED, VECTORIZED
from cdmpp.featurize.batch import dense, from_trees

COL = {name: i for i, name in enumerate(OWN_FEATURES)}

OWN = len(OWN_FEATURES)

def _psf_row_of_leaf(tree) -> dict[int, int]:
    """Leaf index -> its buffer's ``PerStoreFeature`` row: TVM gives one row per written
    buffer in first-store order, init stores skipped (plain loop nests only)."""
    order, out = [], {}
    for i, (buf, init) in enumerate(zip(tree.leaf_buffer, tree.leaf_features[:, COL["is_init"]])):
        if not init:
            order += [buf] if buf not in order else []
            out[i] = order.index(buf)
    return out

def test_vector_add_tree():
    t = featurize(vector_add)
    assert t.node_kind.tolist() == [ROOT, PARALLEL, VECTORIZED, LEAF]
    assert t.node_extent.tolist() == [0, 64, 32, 0]
    assert t.node_parent.tolist() == [-1, 0, 1, 2]
    assert t.leaf_position.tolist() == [3]
    assert t.leaf_buffer == ("C",)
    assert t.leaf_features.shape == (1, FEATURE_DIM) and t.leaf_features.dtype == np.float32
    f = t.leaf_features[0]
    assert f[COL["depth"]] == 2
    assert f[COL["iterations"]] == pytest.approx(np.log2(1 + 64 * 32))
    assert f[COL["inner_vectorized"]] == 1 and f[COL["inner_serial"]] == 0
    assert f[COL["loads"]] == pytest.approx(np.log2(3))  # A and B
    assert f[COL["add_sub"]] == pytest.approx(np.log2(3))  # two adds
    access = f[OWN:].reshape(5, 18)  # C written, A and B read, two buffers' slots empty
    assert access[:, 0].sum() == 2 and access[:, 1].sum() == 1 and not access[3:].any()
    assert t.psf is None  # TVM's PerStoreFeature runs only on request

def test_matmul_tree_with_init_and_two_stages():
    t = featurize(matmul_relu)
    assert t.node_kind.tolist() == [ROOT, SERIAL, SERIAL, UNROLLED, LEAF, LEAF, SERIAL, SERIAL, LEAF]
    assert t.node_parent.tolist() == [-1, 0, 1, 2, 3, 3, 0, 6, 7]
    assert t.leaf_position.tolist() == [4, 5, 8]
    assert t.leaf_buffer == ("C", "C", "D")
    f = t.leaf_features
    assert f[:, COL["is_init"]].tolist() == [1, 0, 0]
    assert f[:, COL["is_reduction"]].tolist() == [0, 1, 0]
    assert f[:, COL["extent_unrolled"]].tolist() == pytest.approx([4.0, 4.0, 0.0])  # log2(16)
    assert f[:, COL["mul"]].tolist() == pytest.approx([0, 1, 0])
    assert f[:, COL["max_min"]].tolist() == pytest.approx([0, 0, 1])
    # PerStoreFeature, on request, has one row per written buffer (init skipped): C, then D
    rows = featurize(matmul_relu, psf=True).psf
    assert rows.shape == (2, PSF_DIM) and rows.dtype == np.float32 and not np.array_equal(rows[0], rows[1])

def test_unsupported_constructs_are_named():
    with pytest.raises(UnsupportedProgramError, match="While"):
        featurize(with_while)
    with pytest.raises(UnsupportedProgramError, match="got str"):
        featurize("not a program")
    import tvm

    two = tvm.IRModule({"a": vector_add, "b": matmul_relu.with_attr("global_symbol", "b")})
    with pytest.raises(UnsupportedProgramError, match="exactly one PrimFunc"):
        featurize(two)

def test_batches_of_ragged_trees_collate():
    trees = featurize_many([vector_add, matmul_relu])
    data = from_trees(trees, [1e-3, 2e-3], [0, 1], ["a", "b"], [0.0, 0.0])
    x, pos, mask = dense(data.x, data.pos, data.ptr)
    assert x.shape == (2, 3, FEATURE_DIM)
    assert mask.tolist() == [[True, False, False], [True, True, True]]
    assert pos.tolist() == [[3, 0, 0], [4, 5, 8]]
    sub = data.subset(np.array([1]))
    assert len(sub) == 1 and sub.x.shape == (3, FEATURE_DIM) and sub.latency.tolist() == [2e-3]

def test_concat_keeps_programs_and_merges_workload_keys():
    from cdmpp.featurize.batch import FeaturizedPrograms

    trees = featurize_many([vector_add, matmul_relu], psf=True)
    a = from_trees(trees, [1e-3, 2e-3], [0, 1], ["va", "mm"], [1.0, 2.0])
    b = from_trees(trees[::-1], [5e-3, 4e-3], [0, 1], ["mm", "other"], [3.0, 4.0])
    both = FeaturizedPrograms.concat([a, b])
    assert len(both) == 4 and both.workload_keys == ["va", "mm", "other"]
    # the matmul is workload 1 in both parts; b's second program keeps its own key
    assert both.workload.tolist() == [0, 1, 1, 2]
    assert both.latency.tolist() == [1e-3, 2e-3, 5e-3, 4e-3] and both.flops.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert np.diff(both.ptr).tolist() == [1, 3, 3, 1] and both.x.shape == (8, FEATURE_DIM)
    np.testing.assert_array_equal(both.leaves(2)[0], a.leaves(1)[0])
    np.testing.assert_array_equal(both.psf_sum[3], a.psf_sum[0])
    np.testing.assert_array_equal(both.psf_rows(2), trees[1].psf)  # the matmul's C and D rows
    np.testing.assert_array_equal(both.subset(np.array([2, 0])).psf_rows(0), trees[1].psf)
    bare = from_trees(featurize_many([vector_add]), [1e-3], [0], ["va"], [1.0])
    assert bare.psf is None and FeaturizedPrograms.concat([a, bare]).psf is None
    with pytest.raises(InputError, match="without TVM's PerStoreFeature"):
        bare.psf_sum  # noqa: B018
    with pytest.raises(ValueError, match="at least one"):
        FeaturizedPrograms.concat([])

def test_cuda_programs_featurize_with_thread_bindings(cuda_schedules):
    from cdmpp.featurize.ast import THREAD_BINDING

    target, schedules = cuda_schedules
    trees = featurize_many([s.mod for s in schedules], target, psf=True)
    for t in trees:
        bound = np.flatnonzero(t.node_kind == THREAD_BINDING)
        tags = {t.node_annotations[i]["thread_tag"] for i in bound}
        assert "threadIdx.x" in tags and tags <= {"blockIdx.x", "threadIdx.x", "vthread.x", "threadIdx.y", "blockIdx.y"}
        leaves = t.leaf_features
        # every leaf under a thread-bound loop counts its extent in extent_thread_binding (log2)
        assert np.all(leaves[:, COL["extent_thread_binding"]] > 0)
        assert leaves[:, OWN:].any(axis=1).all()  # every store touches some buffer
        assert len(t.psf) >= 1  # TVM's rows, on request, for the GPU target too

def test_a_store_tvm_removes_is_counted_and_tvms_rows_are_kept_as_tvm_returns_them():
    """MetaSchedule's RewriteLayout adds a weight-layout-rewrite block; TVM's PerStoreFeature
    removes it before extracting (RemoveWeightLayoutRewriteBlock).  The tree keeps the store
    as a leaf, counts it, and keeps TVM's rows (requested) exactly as TVM returns them."""
    from cdmpp.collect import sample_schedules
    from cdmpp.featurize import featurize_many
    from cdmpp.featurize.ast import FEATURIZER_VERSION
    from cdmpp.tvm_compat import IRModule, Target, per_store_features

    target = {"kind": "llvm", "num-cores": 2}
    func = matmul_relu.with_attr("global_symbol", "main").with_attr("layout_free_buffers", [1])
    sch = sample_schedules(IRModule({"main": func}), target, 2, seed=0)[0]
    assert "layout_rewrite_preproc" in sch.mod.script()  # the program holds a store TVM removes
    tree = featurize_many([sch], target, psf=True)[0]
    rows = per_store_features(Target(target), [sch])[0]
    assert tree.dropped_leaves == 1 and len(rows) == 2
    np.testing.assert_array_equal(tree.psf, rows.astype(np.float32))
    assert FEATURIZER_VERSION >= 3

def test_a_design_space_without_decisions_is_sampled_once():
    """A task whose design space holds no sampling decision (an elementwise add on a CPU
    target) has one program: sampling returns it once instead of 32 copies; a matmul's
    space holds tiles to sample, and gives distinct schedules."""
    from cdmpp.collect import sample_schedules
    from cdmpp.tvm_compat import IRModule

    target = {"kind": "llvm", "num-cores": 2}
    one = sample_schedules(IRModule({"main": vector_add.with_attr("global_symbol", "main")}), target, 32, seed=0)
    assert len(one) == 1
    assert not any(inst.kind.name.startswith("Sample") for inst in one[0].trace.insts)
    many = sample_schedules(IRModule({"main": matmul_relu.with_attr("global_symbol", "main")}), target, 8, seed=0)
    assert len(many) > 1 and len({str(s.trace) for s in many}) > 1


def test_walk_buffer_access_features_equal_tvms_on_plain_loop_nests():
    """The leaves' buffer-access features (``access_features``) are PerStoreFeature's
    buffer-access group (its columns 57-146) computed from the loop nest; where TVM's
    lowering changes nothing, they are equal."""
    from programs import matmul_rowsum_exp

    from cdmpp.featurize.access import ACCESS_DIM
    from cdmpp.featurize.ast import access_features

    for func in (vector_add, matmul_relu, matmul_rowsum_exp):
        tree, walk = featurize(func, psf=True), access_features(func)
        assert walk.shape == (tree.num_leaves, ACCESS_DIM) and walk.dtype == np.float32
        np.testing.assert_array_equal(walk, tree.leaf_features[:, OWN:])
        row_of = _psf_row_of_leaf(tree)
        assert len(row_of) >= 1 and max(row_of.values()) == len(tree.psf) - 1
        for leaf, row in row_of.items():
            np.testing.assert_allclose(walk[leaf], tree.psf[row, 57:147], atol=1e-4)
    walk = access_features(matmul_relu)
    # C += A * B under i, j, k: C is read and written, k does not index C (reused 16 times)
    update = walk[1].reshape(5, 18)
    c = [r for r in update if r[2] == 1]  # the read-write buffer
    assert len(c) == 1 and c[0][7] == 1 and c[0][12] == pytest.approx(np.log2(17))
    with pytest.raises(UnsupportedProgramError, match="While"):
        access_features(with_while)

def _small_folder(tmp_path, records: int = 8):
    """A device folder of the slice's first ``records`` tuning records (all its workloads)."""
    import gzip
    import shutil

    src = Path("datasets/slice/cpu-intel_xeon_processor-emeraldrapids-avx512")
    dst = tmp_path / "device"
    dst.mkdir()
    shutil.copy(src / "manifest.json", dst)
    shutil.copy(src / "database_workload.json.gz", dst)
    with gzip.open(src / "database_tuning_record.json.gz", "rt") as f:
        lines = [next(f) for _ in range(records)]
    (dst / "database_tuning_record.json").write_text("".join(lines))
    return dst

def test_a_folder_read_as_json_featurizes_as_the_tvm_reader_does(tmp_path, monkeypatch):
    """featurize_folder (each record's trace replayed once, from its JSON) gives the same
    programs, features and cache entry as featurize_database of load_device_dir; pooled too;
    and a record whose trace does not replay is left out as the TVM reader leaves it out."""
    import json

    import numpy as np

    import cdmpp.featurize as featurize_pkg
    from cdmpp import dataset as ds
    from cdmpp.featurize import parallel
    from cdmpp.featurize.folder import featurize_database, featurize_folder, measured_record_lines

    names = ("x", "pos", "ptr", "latency", "workload", "flops", "psf", "psf_ptr", "loop_x", "loop_pos", "loop_ptr")
    folder = _small_folder(tmp_path)
    db = ds.load_device_dir(folder)
    assert len(db.programs) == 8
    ref = featurize_database(db)
    cache = tmp_path / "cache"
    data, secs = featurize_folder(folder, cache)
    for name in names:
        assert np.array_equal(getattr(data, name), getattr(ref, name)), name
    assert data.workload_keys == ref.workload_keys and len({a.tobytes() for a in data.x}) > 1
    assert len(secs) == len(db.programs) and all(np.array_equal(a, p.run_secs) for a, p in zip(secs, db.programs))
    featurized = count_featurized(monkeypatch)
    featurize_database(db, cache)  # the entry featurize_folder wrote is the TVM reader's
    assert featurized == []
    monkeypatch.undo()
    target = db.manifest["device"]["target"]
    wl, rec = ds.database_files(folder)
    lines = [obj for _, obj in ds.iter_json_lines(wl, [])]
    records = [(w, record) for w, _, record in measured_record_lines(rec, len(lines))]
    pooled = parallel.featurize_record_lines(lines, records, target, workers=2, chunk=2, pool_from=0)
    alone = featurize_pkg.featurize_many([p.record for p in db.programs], target, psf=True)
    assert len(pooled) == len(alone) == 8
    for a, b in zip(alone, pooled):
        for name in ("leaf_features", "leaf_position", "psf", "node_parent"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
    # a record whose trace names an instruction TVM does not know: both readers leave it out
    text = rec.read_text().splitlines()
    first = json.loads(text[0])
    first[1][0][0][0][0] = "NoSuchInstruction"
    text[0] = json.dumps(first)
    rec.write_text("\n".join(text) + "\n")
    kept = ds.load_device_dir(folder)
    assert len(kept.programs) == 7
    left, secs = featurize_folder(folder, None)
    assert len(left) == len(secs) == 7
    assert np.array_equal(left.x, featurize_database(kept).x)

def test_the_featurize_rate_bench_times_each_process_count_on_the_same_programs(tmp_path, capsys):
    import json

    from cdmpp.cli import main

    folder = "datasets/slice/cpu-intel_xeon_processor-emeraldrapids-avx512"
    out = tmp_path / "rate.json"
    assert main(["bench", "featurize-rate", "-d", folder, "--workers", "1", "2", "--max-records", "6",
                 "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["programs"] == 6
    assert [(r["reader"], r["workers"]) for r in result["rows"]] == [("tvm", 1), ("tvm", 2), ("json", 1), ("json", 2)]
    assert all(r["programs_per_s"] > 0 and r["seconds"] >= r["read_s"] for r in result["rows"])
    assert "| reader | processes |" in capsys.readouterr().out and out.with_suffix(".md").exists()
    assert main(["bench", "featurize-rate", "-d", folder, "--workers", "0"]) != 0
    assert "workers must be >= 1" in capsys.readouterr().err
