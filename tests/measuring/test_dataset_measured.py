import gzip
import re

from cdmpp import dataset as ds
from cdmpp.card import card


def test_corrupt_lines_are_reported_and_the_rest_is_read(tiny_collection, tmp_path):
    _, summary = tiny_collection
    good = ds.load_device_dir(summary.device_dir)
    lines = (summary.device_dir / ds.RECORD_FILE).read_text().splitlines()
    broken = [lines[0][: len(lines[0]) // 2]] + lines[1:] + ['[99, "x"]']
    with gzip.open(tmp_path / (ds.RECORD_FILE + ".gz"), "wt") as f:  # the shipped, compressed form
        f.write("\n".join(broken) + "\n")
    with gzip.open(tmp_path / (ds.WORKLOAD_FILE + ".gz"), "wt") as f:
        f.write((summary.device_dir / ds.WORKLOAD_FILE).read_text())
    db = ds.load_device_dir(tmp_path)
    assert len(db.programs) == len(good.programs) - 1
    assert [b.lineno for b in db.bad_lines] == [1, len(lines) + 1]
    assert "invalid JSON" in db.bad_lines[0].error and "out of range" in db.bad_lines[1].error
    # the workloads alone (tune-benchmark's task choice): the same workloads, no record read
    only = ds.load_device_dir(tmp_path, records=False)
    assert only.workload_keys == good.workload_keys and only.programs == [] and only.bad_lines == []
    assert only.manifest == db.manifest

def test_pack_and_card(tiny_collection, tmp_path):
    import shutil

    _, summary = tiny_collection
    dev = tmp_path / "dev"
    shutil.copytree(summary.device_dir, dev)
    packed = ds.pack(dev)
    assert {p.name for p in packed} >= {ds.WORKLOAD_FILE + ".gz", ds.RECORD_FILE + ".gz"}
    for name in (ds.WORKLOAD_FILE, ds.RECORD_FILE):
        (dev / name).unlink()  # what a fresh clone has: only the .gz files
    assert len(ds.load_device_dir(dev).programs) == len(ds.load_device_dir(summary.device_dir).programs)
    text = card(dev)
    # every extracted task is listed in the manifest; max_tasks_per_network=2 measures two
    assert re.search(r"\| dcgan-b1 \| 2 / \d+ \|", text) and "Repeat CV" in text
    assert "evolutionary_fraction 0: random samples only" in text  # the tiny collection samples at random only
