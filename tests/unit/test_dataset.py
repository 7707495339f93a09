import pytest

from cdmpp import dataset as ds


def test_empty_database_is_a_clear_error(tmp_path):
    (tmp_path / ds.WORKLOAD_FILE).write_text("")
    (tmp_path / ds.RECORD_FILE).write_text("")
    with pytest.raises(ds.DatasetError, match="no measured tuning record"):
        ds.load_database(tmp_path / ds.WORKLOAD_FILE, tmp_path / ds.RECORD_FILE)
    with pytest.raises(ds.DatasetError, match="not found"):
        ds.load_database(tmp_path / "nope.json", tmp_path / ds.RECORD_FILE)


def test_plain_json_reading_gives_the_tvm_readers_programs(tmp_path):
    """load_device_json (the card's and the evaluation's reader) keeps the programs, order,
    repeats and warm repeats that load_device_dir keeps, without building TVM objects."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    import numpy as np

    src = ds.device_dirs(Path(__file__).parents[2] / "datasets" / "slice")[0]
    dev = tmp_path / src.name
    dev.mkdir()
    for name in (ds.WORKLOAD_FILE, ds.MANIFEST_FILE):
        shutil.copy(ds.resolve(src / name), dev / Path(ds.resolve(src / name)).name)
    with gzip.open(src / (ds.RECORD_FILE + ".gz"), "rt") as f:
        lines = [next(f) for _ in range(40)]
    (dev / ds.RECORD_FILE).write_text("".join(lines) + "not json\n")
    # a warm file holding every third program, with its repeats doubled so that warm and cold differ
    warm = []
    for line in lines[::3]:
        widx, rec = json.loads(line)
        if rec[1]:
            rec[1] = [2 * s for s in rec[1]]
        warm.append(json.dumps([widx, rec]))
    (dev / ds.WARM_RECORD_FILE).write_text("\n".join(warm) + "\n")

    tvm_db, plain = ds.load_device_dir(dev), ds.load_device_json(dev)
    assert plain.device_id == tvm_db.device_id and plain.manifest == tvm_db.manifest
    assert plain.workload_keys == tvm_db.workload_keys and len(plain.workloads) == len(tvm_db.workloads)
    assert len(plain.programs) == len(tvm_db.programs) > 20
    for a, b in zip(plain.programs, tvm_db.programs, strict=True):
        assert a.workload_index == b.workload_index and np.array_equal(a.run_secs, b.run_secs)
        assert (a.warm_secs is None) == (b.warm_secs is None)
        if a.warm_secs is not None:
            assert np.array_equal(a.warm_secs, b.warm_secs) and a.warm_latency == 2 * a.latency
        assert isinstance(a.record, list)  # the record's JSON, not a TVM object
    assert sum(p.warm_secs is not None for p in plain.programs) >= 5
    assert [b.lineno for b in plain.bad_lines] == [41] and "invalid JSON" in plain.bad_lines[0].error
