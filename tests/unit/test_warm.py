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


def test_truth_check_table_shows_the_kernels_timed_inside_the_network():
    """With ``--profile``, the kernels' time inside the network is a column, and each kernel
    class's level against it is a protocol row of its own."""
    from benchmarks.truth_check import format_truth_check

    level = {"tasks": 1, "calls": 2, "measured_s": 0.004, "predicted_s": 0.006, "mean_log_ratio": 0.405,
             "within": 0.0, "worst_ratio": 1.5}
    row = {"network": "n", "tasks": 2, "calls": 3, "measured_e2e_s": 0.010, "measured_sum_s": 0.015,
           "estimate_s": 0.012, "estimate_low_s": 0.011, "estimate_high_s": 0.013, "profiled_kernels_s": 0.008,
           "by_class_in_network": {"untunable": level}}
    lines = format_truth_check([row], markdown=True).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    cells = dict(zip(head, [c.strip() for c in lines[2].strip("|").split("|")]))
    assert cells["kernels in the network / e2e"] == "0.80"
    assert any(line.startswith("| n | untunable | in the network | 1 | 2 | 4.00 | 6.00 | 1.50 | +0.41 | 0% |")
               for line in lines)
