import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests/programs.py


#: fixtures that build and time programs on this CPU: only tests/measuring/ may use them
MEASURING_FIXTURES = {"tiny_collection", "tiny_featurized", "warm_checkpoint"}


def pytest_collection_modifyitems(config, items):
    """The two layers: ``tests/unit/`` builds and times nothing, ``tests/measuring/`` builds
    and times programs on this CPU (marked ``measures``; ``.ci/run`` runs each folder in
    turn).  A unit test that asks for a measuring fixture is an error."""
    misplaced = []
    for item in items:
        layer = Path(str(item.fspath)).parent.name
        if layer == "measuring":
            item.add_marker(pytest.mark.measures)
        elif MEASURING_FIXTURES & set(getattr(item, "fixturenames", ())):
            misplaced.append(item.nodeid)
    if misplaced:
        raise pytest.UsageError(f"tests/unit/ tests that build and time programs (move them to tests/measuring/): "
                                f"{', '.join(misplaced)}")


@pytest.fixture(scope="session", autouse=True)
def no_held_out_extraction():
    """Collections in tests skip extracting the three held-out test networks (some 30 s each
    time); ``test_held_out_networks_workloads_are_never_collected`` runs the real thing."""
    import cdmpp.collect.sampling as sampling

    real = sampling.held_out_workloads
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sampling, "held_out_workloads", lambda networks, target, manifest: {n: [] for n in networks})
        yield real


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
    from cdmpp.featurize.folder import featurize_database

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


def subset_device_folder(src: Path, dst: Path, workloads_per_network: int = 2, programs_per_workload: int = 8) -> Path:
    """Copy part of a measured device folder: a few workloads of each network, a few of
    their measured records each (real measurements, re-indexed JSONDatabase lines)."""
    import json

    from cdmpp import dataset as ds

    manifest = json.loads((src / ds.MANIFEST_FILE).read_text())
    with ds.open_text(ds.resolve(src / ds.WORKLOAD_FILE)) as f:
        wl_lines = f.read().splitlines()
    keys = [json.loads(line)[0] for line in wl_lines]
    by_net: dict[str, list[str]] = {}
    for t in manifest["tasks"]:
        by_net.setdefault(t["network"], []).append(t["workload_key"])
    with ds.open_text(ds.resolve(src / ds.RECORD_FILE)) as f:
        rec_lines = f.read().splitlines()
    measured: dict[int, list[str]] = {}
    for line in rec_lines:
        idx = json.loads(line)[0]
        measured.setdefault(idx, []).append(line)
    index_of = {k: i for i, k in enumerate(keys)}
    keep: list[int] = []
    for net_keys in by_net.values():
        chosen = [index_of[k] for k in net_keys if k in index_of and len(measured.get(index_of[k], [])) >= 3]
        keep += [i for i in chosen[:workloads_per_network] if i not in keep]
    dst.mkdir(parents=True, exist_ok=True)
    new_of = {old: new for new, old in enumerate(keep)}
    (dst / ds.WORKLOAD_FILE).write_text("".join(wl_lines[i] + "\n" for i in keep))
    out = []
    for old in keep:
        for line in measured[old][:programs_per_workload]:
            rec = json.loads(line)
            out.append(json.dumps([new_of[old], rec[1]]))
    (dst / ds.RECORD_FILE).write_text("".join(line + "\n" for line in out))
    kept_keys = {keys[i] for i in keep}
    manifest["tasks"] = [t for t in manifest["tasks"] if t["workload_key"] in kept_keys]
    manifest.pop("collections", None)
    (dst / ds.MANIFEST_FILE).write_text(json.dumps(manifest))
    return dst


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def two_device_dataset(tmp_path_factory):
    """A dataset of two real device folders (subsets of the shipped Intel AVX-512 slice and
    the Intel AVX2 corpus folder), a few workloads per network each."""
    out = tmp_path_factory.mktemp("two-devices")
    for src in (
        ROOT / "datasets/slice/cpu-intel_xeon_processor-emeraldrapids-avx512",
        ROOT / "datasets/corpus/cpu-intel_xeon_processor-emeraldrapids-avx2",
    ):
        subset_device_folder(src, out / src.name)
    return out


@pytest.fixture(scope="module")
def device_checkpoint(two_device_dataset, tmp_path_factory):
    """A small model trained over two device folders (``two_device_dataset``), DCGAN held out."""
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    out = tmp_path_factory.mktemp("ckpt") / "two"
    result = train(
        TrainData([two_device_dataset], "dcgan-b1"),
        out,
        ModelConfig(d_model=32, n_heads=2, ff_dim=64, device_dim=8, trace_tokens=False, loop_tokens=False,
                    pooling="mean"),
        TrainConfig(epochs=3, batch_size=16),
        use_wandb=False,
        progress=False,
    )
    assert result.by_device
    return out, result.rows


@pytest.fixture(scope="module")
def client():
    """A test client of the HTTP service, with small limits."""
    from fastapi.testclient import TestClient

    from cdmpp.serve.app import ServeConfig, create_app

    with TestClient(create_app(config=ServeConfig(max_programs=4, max_body_bytes=4_000_000, timeout_s=60))) as c:
        yield c


@pytest.fixture(scope="module")
def shipped():
    """The shipped checkpoint's predictor."""
    from cdmpp.predictor import LatencyPredictor

    return LatencyPredictor.load()


@pytest.fixture(scope="module")
def lse_device_checkpoint(two_device_dataset, tmp_path_factory):
    """The same two devices, with the log-sum-exp head (a latency term per token)."""
    from cdmpp.model import ModelConfig
    from cdmpp.train.config import TrainConfig, TrainData
    from cdmpp.train.train import train

    out = tmp_path_factory.mktemp("ckpt") / "lse"
    train(TrainData([two_device_dataset], "dcgan-b1"), out,
          ModelConfig(d_model=32, n_heads=2, ff_dim=64, device_dim=8, trace_tokens=False, loop_tokens=False,
                      pooling="lse"),
          TrainConfig(epochs=3, batch_size=16), use_wandb=False, progress=False)
    return out, None
