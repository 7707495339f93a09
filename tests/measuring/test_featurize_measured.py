import numpy as np
import pytest
from support import count_featurized

from cdmpp.featurize import (
    UnsupportedProgramError,
    featurize_many,
)


def test_a_grown_folder_featurizes_only_its_new_programs(tiny_collection, tmp_path, monkeypatch):
    """The cache entry of an earlier state of a folder (its first programs) is reused: only
    the programs after it are featurized and the result equals a fresh featurization. An
    entry of the device whose programs are not the folder's first ones is not reused."""
    import dataclasses

    from cdmpp import dataset as ds
    from cdmpp.featurize.folder import featurize_database

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    n = len(db.programs)
    assert n >= 4
    fresh = featurize_database(db)
    cache, other_cache = tmp_path / "cache", tmp_path / "other"
    # not a prefix: the folder's programs from the second one on
    featurize_database(dataclasses.replace(db, programs=db.programs[1:]), other_cache)
    featurized = count_featurized(monkeypatch)
    featurize_database(db, other_cache)
    assert len(featurized) == n
    featurized.clear()
    featurize_database(dataclasses.replace(db, programs=db.programs[: n - 2]), cache)
    assert len(featurized) == n - 2
    featurized.clear()
    grown = featurize_database(db, cache)
    assert len(featurized) == 2
    for name in ("x", "pos", "ptr", "latency", "workload", "flops", "psf", "psf_ptr"):
        assert np.array_equal(getattr(grown, name), getattr(fresh, name)), name
    assert grown.workload_keys == fresh.workload_keys and len(list(cache.iterdir())) == 2
    featurized.clear()
    featurize_database(db, cache)  # the grown entry itself
    assert featurized == []

def test_records_featurized_on_a_pool_of_processes_are_the_same_trees_in_order(tiny_collection):

    from cdmpp import dataset as ds
    from cdmpp.featurize.parallel import featurize_records

    _, summary = tiny_collection
    db = ds.load_device_dir(summary.device_dir)
    records = [p.record for p in db.programs][:12]
    assert len(records) >= 4
    target = db.manifest["device"]["target"]
    alone = featurize_many(records, target, psf=True)
    pooled = featurize_records(records, target, workers=2, chunk=2, pool_from=0)
    assert len(pooled) == len(alone) == len(records)
    for a, b in zip(alone, pooled):
        for name in ("node_parent", "node_kind", "node_extent", "leaf_position", "leaf_features", "psf"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert (a.node_name, a.node_annotations, a.leaf_buffer) == (b.node_name, b.node_annotations, b.leaf_buffer)
    assert len({a.leaf_features.tobytes() for a in pooled}) > 1  # not one tree repeated
    with pytest.raises(ValueError, match="workers and chunk"):
        featurize_records(records, target, workers=0)
    with pytest.raises(UnsupportedProgramError, match="records 2-3: program 0"):
        featurize_records([*records[:2], "not a record", *records[3:]], target, chunk=2)
