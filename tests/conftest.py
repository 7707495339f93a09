import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/programs.py


@pytest.fixture(scope="session")
def tiny_collection(tmp_path_factory):
    """A real collection on this CPU: 2 DCGAN tasks x 3 programs, built and timed for real."""
    from cdmpp.collect import CollectConfig, MeasureConfig, collect

    out = tmp_path_factory.mktemp("dataset")
    cfg = CollectConfig(
        networks=["dcgan-b1"],
        out_dir=out,
        programs_per_task=3,
        batch_size=4,
        max_tasks_per_network=2,
        evolutionary_fraction=0.0,
        measure=MeasureConfig(repeat=3),
    )
    first = collect(cfg, progress=False)
    return cfg, first


@pytest.fixture(scope="session")
def tiny_featurized(tiny_collection):
    from cdmpp import dataset as ds
    from cdmpp.featurize.batch import featurize_database

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    return db, featurize_database(db)


@pytest.fixture(scope="session")
def cuda_schedules():
    """Random CUDA schedules of a small workload for TVM's H100 tag, sampled on this CPU."""
    from programs import matmul_rowsum_exp

    from cdmpp.collect import sample_schedules
    from cdmpp.device import gpu_from_tag
    from cdmpp.tvm_compat import IRModule, Target

    target = Target(gpu_from_tag("nvidia/nvidia-h100").target)
    mod = IRModule({"main": matmul_rowsum_exp.with_attr("global_symbol", "main")})
    return target, sample_schedules(mod, target, 8, seed=0)
