"""Helpers shared by the unit and the measuring layers of the tests."""

AVX2 = "cpu-intel_xeon_processor-emeraldrapids-avx2"


def count_featurized(monkeypatch) -> list:
    """The programs ``featurize_many`` is called on from now on (it still featurizes them)."""
    import cdmpp.featurize as featurize_pkg

    featurized = []
    real = featurize_pkg.featurize_many

    def counting(records, target, psf=False):
        featurized.extend(records)
        return real(records, target, psf=psf)

    monkeypatch.setattr(featurize_pkg, "featurize_many", counting)
    return featurized


def program_keys(device_dir):
    """``([(workload key, program key), ...], database)`` of a device folder's measured programs."""
    from cdmpp import dataset as ds
    from cdmpp.collect.store import program_hash_key
    from cdmpp.featurize import as_module

    db = ds.load_device_dir(device_dir)
    return [(db.workload_keys[p.workload_index], program_hash_key(as_module(p.record))) for p in db.programs], db


def gather_module(rows: int = 4096):
    """``out[i, j] = table[ids[i], j]``: an embedding lookup (``take``) as Relax lowers it."""
    from tvm.script import tirx as T

    from cdmpp.tvm_compat import IRModule

    @T.prim_func(s_tir=True)
    def gather(
        table: T.Buffer((rows, 64), "float32"), ids: T.Buffer((256,), "int64"), out: T.Buffer((256, 64), "float32")
    ):
        for i, j in T.grid(256, 64):
            with T.sblock("T_take"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = table[ids[vi], vj]

    return IRModule({"main": gather.with_attr("global_symbol", "main")})


def matmul_module():
    """A 32x32x32 matmul: a design space with many distinct schedules."""
    from tvm.script import tirx as T

    from cdmpp.tvm_compat import IRModule

    @T.prim_func(s_tir=True)
    def mm(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
        for i, j, k in T.grid(32, 32, 32):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]

    return IRModule({"main": mm.with_attr("global_symbol", "main")})


def tiny_cfg(tmp_path, **kw):
    from cdmpp.collect import CollectConfig, MeasureConfig

    base = dict(networks=["dcgan-b1"], out_dir=tmp_path, programs_per_task=2, batch_size=2,
                evolutionary_fraction=0.0, measure=MeasureConfig(repeat=3))
    return CollectConfig(**{**base, **kw})
