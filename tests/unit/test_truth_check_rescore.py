"""``cdmpp bench truth-check --rescore``: stored truth-check rows estimated again, nothing timed."""

import copy
import json
from pathlib import Path

import pytest

from cdmpp.errors import InputError

# the rocketlake rows, estimated by the shipped checkpoint (rescored from truth-check-outside-rocketlake.json)
ROWS = Path(__file__).parents[2] / "docs/results/truth-check-outside-rocketlake-sweepw-retrain.json"
MEASURED = ("measured_e2e_s", "measured_sum_s", "retimed_sum_s", "retimed_warm_sum_s", "profiled_kernels_s",
            "outside_kernels_s")


def _stored_row(network: str) -> dict:
    return next(r for r in json.loads(ROWS.read_text()) if r["network"] == network)


def test_rescoring_with_the_checkpoint_that_made_the_rows_gives_their_estimate_back():
    """The shipped checkpoint estimated the stored rows (rocketlake's measurements): rescoring
    them again, on any CPU, gives the same estimate, task by task, and keeps every measured
    time as it was."""
    from benchmarks.truth_check import rescore_truth_check

    old = _stored_row("docs/examples/vit_tiny.py:build")
    (new,) = rescore_truth_check([copy.deepcopy(old)], None, progress=False)
    for key in ("estimate_s", "estimate_low_s", "estimate_high_s", "warm_estimate_s"):
        assert new[key] == pytest.approx(old[key], rel=1e-4), key
    assert {k: new[k] for k in MEASURED} == {k: old[k] for k in MEASURED}
    by_task = {t["task"]: t for t in new["per_task"]}
    assert len(by_task) == old["tasks"]
    for t in old["per_task"]:
        assert by_task[t["task"]]["estimate_s"] == pytest.approx(t["estimate_s"], rel=1e-4), t["task"]
        assert by_task[t["task"]].get("in_network_s") == t.get("in_network_s")
        assert by_task[t["task"]].get("retimed_warm_s") == t.get("retimed_warm_s")
    for key in ("by_class", "by_class_in_network", "by_class_retimed_warm"):
        for cls, v in old[key].items():
            assert new[key][cls]["within"] == pytest.approx(v["within"]), (key, cls)
            assert new[key][cls]["measured_s"] == pytest.approx(v["measured_s"], rel=1e-9), (key, cls)


def test_rescoring_refuses_rows_it_cannot_reproduce(tmp_path):
    from benchmarks.truth_check import rescore_truth_check

    row = _stored_row("docs/examples/vit_tiny.py:build")
    folder = tmp_path / "cpu-x"
    folder.mkdir()
    (folder / "manifest.json").write_text("{}")
    with pytest.raises(InputError, match="device folder, not a tuning work dir"):
        rescore_truth_check([{**row, "schedules": str(folder)}], None, progress=False)
    fewer = {**row, "per_task": row["per_task"][1:]}
    with pytest.raises(InputError, match="its tasks differ from the stored row's"):
        rescore_truth_check([fewer], None, progress=False)
