"""The compiled compact-AST walk gives the Python walk's trees, every value, on every program
of the shipped slice and on CUDA programs (thread bindings, pipeline annotations)."""

from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "datasets/slice/cpu-intel_xeon_processor-emeraldrapids-avx512"
GPU = ROOT / "datasets/gpu/gpu-nvidia_h100_80gb_hbm3-sm90"
ARRAYS = ("node_parent", "node_kind", "node_extent", "leaf_position", "leaf_features")
OTHERS = ("node_name", "node_annotations", "leaf_buffer", "dropped_leaves")


def _assert_same(compiled, python, where: str) -> None:
    for name in ARRAYS:
        a, b = getattr(compiled, name), getattr(python, name)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: {name}"
        assert a.tobytes() == b.tobytes(), f"{where}: {name} differs"  # every bit, NaN and -0.0 included
    for name in OTHERS:
        assert getattr(compiled, name) == getattr(python, name), f"{where}: {name}"


def test_the_compiled_walk_is_built_by_the_install():
    from cdmpp.featurize.compiled import compiled_walk, library_path

    assert library_path() is not None, "the compiled featurizer is not built: pip install -e . builds it"
    assert compiled_walk() is not None


@pytest.mark.parametrize("folder", [SLICE, GPU], ids=["slice", "cuda"])
def test_compiled_and_python_walks_give_identical_trees(folder):
    from cdmpp import dataset as ds
    from cdmpp.featurize import as_module, build_tree

    programs = ds.load_device_dir(folder).programs
    assert len(programs) > 500
    leaves = 0
    for i, p in enumerate(programs):
        mod = as_module(p.record)
        compiled, python = build_tree(mod), build_tree(mod, compiled=False)
        _assert_same(compiled, python, f"{folder.name} program {i}")
        leaves += compiled.num_leaves
    assert leaves > 2 * len(programs)


def test_the_compiled_walk_refuses_what_the_python_walk_refuses():
    from programs import with_while

    from cdmpp.featurize import UnsupportedProgramError, build_tree

    for compiled in (True, False):
        with pytest.raises(UnsupportedProgramError, match="While"):
            build_tree(with_while, compiled=compiled)


def test_a_program_the_compiled_walk_leaves_to_python_gets_the_same_tree():
    """An annotation value that is neither an integer, an integer array nor a string (a float
    here) is printed the way Python prints it: the compiled walk hands the program back."""
    import tvm
    from programs import matmul_relu

    from cdmpp.featurize import build_tree
    from cdmpp.featurize.compiled import compiled_walk

    sch = tvm.s_tir.Schedule(matmul_relu)
    loop = sch.get_loops(sch.get_sblock("C"))[0]
    sch.annotate(loop, "some_ratio", 0.5)
    func = sch.mod["main"]
    assert compiled_walk()(func)[:1] == b"F"
    tree = build_tree(func)
    _assert_same(tree, build_tree(func, compiled=False), "annotated matmul")
    assert tree.node_annotations[1]["some_ratio"] == "0.5"
    assert np.isfinite(tree.leaf_features).all()
