"""The warm timing protocol: a device row of its own, learned, and the in-network estimate."""



def test_truth_check_table_shows_the_warm_sums_beside_the_cold_ones():
    from benchmarks.truth_check import format_truth_check

    row = {"network": "n", "tasks": 2, "calls": 3, "measured_e2e_s": 0.010, "measured_sum_s": 0.015,
           "estimate_s": 0.012, "estimate_low_s": 0.011, "estimate_high_s": 0.013, "measured_warm_sum_s": 0.011,
           "warm_estimate_s": None}
    lines = format_truth_check([row], markdown=True).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(head, [c.strip() for c in lines[2].strip("|").split("|")]))
    assert cells["sum / e2e"] == "1.50" and cells["warm sum / e2e"] == "1.10"
    assert cells["estimate / e2e"] == "1.20" and cells["warm estimate / e2e"] == "-"
