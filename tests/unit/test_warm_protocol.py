"""``cdmpp bench warm-protocol``: cold / warm labels per collection protocol, and a task's
time inside the network against its retimed record."""

import json

import pytest


def _folder(tmp_path, measured=(2, 2)):
    """A device folder of two workloads (one of a sweep entry, one of a zoo network) and two
    collections, the first with one warm run per repeat, the second with 1 ms repeats."""
    (tmp_path / "database_workload.json").write_text('["11", {}]\n["22", {}]\n')
    cold = [(0, "a", 10e-6), (1, "b", 50e-6), (0, "c", 12e-6), (1, "d", 400e-6)]
    warm = {"a": 5e-6, "b": 25e-6, "c": 3e-6, "d": 400e-6}
    rec = "".join(json.dumps([w, [[t], [s, s, s], {}, []]]) + "\n" for w, t, s in cold)
    (tmp_path / "database_tuning_record.json").write_text(rec)
    (tmp_path / "database_tuning_record_warm.json").write_text(
        "".join(json.dumps([w, [[t], [warm[t]] * 3, {}, []]]) + "\n" for w, t, _ in cold))
    manifest = {"tasks": [{"network": "sweep-8x64", "workload_key": "11"}, {"network": "resnet_18-b1", "workload_key": "22"}],
                "collections": [{"measured": measured[0], "measurement": {"warm": True}},
                                {"measured": measured[1], "measurement": {"warm": True, "warm_min_repeat_ms": 1}}]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path


def test_cold_over_warm_is_grouped_by_family_protocol_and_band(tmp_path):
    from benchmarks.warm_protocol import folder_ratios

    rows = {(r["family"], r["warm_min_repeat_ms"], r["band"]): (r["n"], r["median"]) for r in folder_ratios(_folder(tmp_path))}
    assert rows == {("sweep", 0, "[5, 20) us"): (1, 2.0), ("zoo", 0, "[20, 100) us"): (1, 2.0),
                    ("sweep", 1, "[5, 20) us"): (1, 4.0), ("zoo", 1, "[100, 1000) us"): (1, 1.0)}


def test_a_manifest_that_cannot_place_each_record_is_refused(tmp_path):
    from benchmarks.warm_protocol import folder_ratios
    from cdmpp.errors import InputError

    with pytest.raises(InputError, match="measured 3 programs but the record file has 4 lines"):
        folder_ratios(_folder(tmp_path, measured=(2, 1)))


def test_in_network_time_over_the_retimed_record_and_the_instrument_excess():
    from benchmarks.warm_protocol import in_network_ratios

    tasks = [{"task": "t1", "weight": 2, "kernel_class": "untunable", "in_network_s": 30e-6, "retimed_s": 20e-6,
              "retimed_warm_s": 10e-6},
             {"task": "t2", "weight": 1, "kernel_class": "tunable", "in_network_s": 600e-6, "retimed_s": 500e-6,
              "retimed_warm_s": 300e-6},
             {"task": "v", "weight": 1, "kernel_class": "untunable", "view": True, "in_network_s": 1e-6}]
    row = {"network": "n", "per_task": tasks, "profiled_kernels_s": 660e-6 + 30e-6, "measured_e2e_s": 600e-6}
    bands, excess = in_network_ratios([row])
    got = {(b["kernel_class"], b["band"]): (b["in_over_cold"]["median"], b["in_over_warm"]["median"]) for b in bands}
    assert got == {("tunable", "[100, 1000) us"): (pytest.approx(1.2), pytest.approx(2.0)),
                   ("untunable", "[5, 20) us"): (pytest.approx(1.5), pytest.approx(3.0))}
    assert excess[0]["kernel_calls"] == 3 and excess[0]["excess_per_call_s"] == pytest.approx(30e-6)


def test_rows_without_in_network_times_are_refused():
    from benchmarks.warm_protocol import in_network_ratios
    from cdmpp.errors import InputError

    with pytest.raises(InputError, match="--profile"):
        in_network_ratios([{"network": "n", "per_task": [{"task": "t", "weight": 1, "retimed_s": 1e-5}]}])


def test_estimates_are_scored_against_each_measurement_of_the_same_tasks():
    import math

    from benchmarks.warm_protocol import estimate_levels
    from cdmpp.errors import InputError

    # t1's warm estimate is exact against its warm timing and half its time in the network;
    # t2 has no time in the network, so it counts in no comparison; the view never counts
    tasks = [{"task": "t1", "weight": 2, "kernel_class": "untunable", "estimate_s": 40e-6, "warm_estimate_s": 10e-6,
              "retimed_s": 20e-6, "retimed_warm_s": 10e-6, "in_network_s": 20e-6},
             {"task": "t2", "weight": 1, "kernel_class": "untunable", "estimate_s": 1e-3, "warm_estimate_s": 1e-3,
              "retimed_s": 1e-6, "retimed_warm_s": 1e-6, "in_network_s": None},
             {"task": "t3", "weight": 1, "kernel_class": "tunable", "estimate_s": 300e-6, "warm_estimate_s": 240e-6,
              "retimed_s": 300e-6, "retimed_warm_s": 200e-6, "in_network_s": 250e-6},
             {"task": "v", "weight": 1, "kernel_class": "untunable", "view": True, "estimate_s": 1.0,
              "warm_estimate_s": 1.0, "retimed_s": 1e-6, "retimed_warm_s": 1e-6, "in_network_s": 1e-6}]
    got = {(r["kernel_class"], r["band"], r["comparison"]): (r["tasks"], r["level"], r["within"])
           for r in estimate_levels([{"network": "n", "per_task": tasks}])}
    assert got[("untunable", "all", "cold estimate / retimed cold")] == (1, pytest.approx(math.log(2)), 0.0)
    assert got[("untunable", "all", "warm estimate / retimed warm")] == (1, pytest.approx(0.0), 1.0)
    assert got[("untunable", "[5, 20) us", "warm estimate / in network")] == (1, pytest.approx(math.log(0.5)), 0.0)
    assert got[("tunable", "[100, 1000) us", "warm estimate / retimed warm")] == (1, pytest.approx(math.log(1.2)), 1.0)
    assert len(got) == 2 * 2 * 3  # two classes, "all" and one band each, three comparisons
    with pytest.raises(InputError, match="--profile"):
        estimate_levels([{"network": "n", "per_task": tasks[1:2]}])
