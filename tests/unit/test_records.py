"""The one reader of MetaSchedule's JSONDatabase line formats (``cdmpp.records``)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from cdmpp.errors import InputError
from cdmpp.records import decode_record, parse_record, read_records, read_workload_keys

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_record_line_decodes_to_index_trace_repeats_and_label():
    rec = decode_record([3, [[["step"], []], [0.003, 0.001, 0.002], {"kind": "llvm"}, []]], lineno=7)
    assert (rec.lineno, rec.workload_index, rec.trace) == (7, 3, [["step"], []])
    assert rec.run_secs.dtype == np.float64 and rec.label == 0.002
    failed = decode_record([0, [[[], []], [1e10], {}, []]])
    assert failed.run_secs is None and failed.label is None


@pytest.mark.parametrize("line, problem", [
    ({"a": 1}, "a tuning record is"),
    (["x", [[[], []], [0.1]]], "not an integer"),
    ([-1, [[[], []], [0.1]]], "negative"),
    ([0, [[[], []], ["fast"]]], "are not numbers"),
])
def test_a_malformed_record_line_names_its_problem(line, problem):
    with pytest.raises(ValueError, match=problem):
        decode_record(line)


def test_the_file_reader_keeps_good_lines_and_names_bad_ones(tmp_path):
    wl = _write(tmp_path / "wl.json", [json.dumps(["111", {}]), json.dumps(["222", {}])])
    rec = _write(tmp_path / "rec.json", [
        json.dumps([0, [[[], []], [0.002, 0.004], {}, []]]),
        '[1, [[[], []], [0.00',  # truncated
        json.dumps([5, [[[], []], [0.001], {}, []]]),  # beyond the workload file
        json.dumps([1, [[[], []], None, {}, []]]),  # failed
        json.dumps([1, [[[], []], [0.005], {}, []]]),
    ])
    keys = read_workload_keys(wl)
    bad: list = []
    got = list(read_records(rec, bad, n_workloads=len(keys), measured=True))
    assert keys == ["111", "222"]
    assert [(r.lineno, r.workload_index, r.label) for r in got] == [(1, 0, 0.003), (5, 1, 0.005)]
    assert [(b.lineno, b.error.split(":")[0]) for b in bad] == [(2, "invalid JSON"), (3, "bad tuning record")]
    assert "out of range" in bad[1].error


def test_parse_record_names_where_the_bad_line_is():
    with pytest.raises(InputError, match=r"^db.json:4: not a MetaSchedule tuning record: workload index 2"):
        parse_record([2, [[[], []], [0.1], {}, []]], [], "db.json:4")


def test_no_other_module_decodes_a_record_line():
    """The line ``[workload index, [trace, run_secs, ...]]`` is indexed in cdmpp.records alone."""
    pattern = re.compile(r"\[1\]\[[01]\]|obj\[1\]")
    hits = []
    for folder in ("cdmpp", "featurize", "train", "serve", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "records.py":
                continue
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, hits
