"""The winner's-curse study: a tuner's picks corrected by the other networks' factor."""

import math

import pytest


def _row(network: str, tunable: tuple[float, float], untunable: tuple[float, float], e2e: float) -> dict:
    """A truth-check row of two tasks: ``(estimate, retimed)`` seconds of each class."""
    return {"network": network, "measured_e2e_s": e2e, "retimed_sum_s": tunable[1] + untunable[1],
            "estimate_s": tunable[0] + untunable[0], "warm_estimate_s": None, "between_kernels_estimate_s": 0.001,
            "per_task": [
                {"task": "dense", "weight": 1, "kernel_class": "tunable", "estimate_s": tunable[0],
                 "measured_s": 9.0, "retimed_s": tunable[1]},
                {"task": "softmax", "weight": 1, "kernel_class": "untunable", "estimate_s": untunable[0],
                 "measured_s": untunable[1]},
            ]}


def test_a_network_is_corrected_by_the_other_networks_of_its_tuner_alone():
    from benchmarks.selection_study import format_selection_study, run_selection_study

    rows = [_row("a", (0.010, 0.020), (0.004, 0.002), 0.030), _row("b", (0.010, 0.015), (0.001, 0.001), 0.020),
            _row("c", (0.010, 0.040), (0.001, 0.001), 0.050), _row("a", (0.010, 0.010), (0.004, 0.002), 0.015)]
    out = run_selection_study(rows, ["cdmpp", "cdmpp", "cdmpp", "xgb"])
    a, b, c, a_xgb = out
    assert a["own_factor"] == pytest.approx(2.0)  # its own records: retimed, not the recorded 9 s
    assert a["factor"] == pytest.approx(math.sqrt(1.5 * 4.0)) and a["factor_from"] == 2  # b and c, never a itself
    assert a["corrected_s"] == pytest.approx(0.010 * math.sqrt(6.0) + 0.004)  # the untunable task is left alone
    assert a["corrected_network_s"] == pytest.approx(a["corrected_s"] + 0.001)  # plus the time between kernels
    assert (a_xgb["factor"], a_xgb["factor_from"]) == (1.0, 0)  # no other xgb network: no correction
    assert a_xgb["corrected_s"] == pytest.approx(a_xgb["estimate_s"])
    assert "within 0.9-1.1" in format_selection_study(out, markdown=True)


def test_one_tuner_name_per_row_is_required():
    from benchmarks.selection_study import run_selection_study
    from cdmpp.errors import InputError

    with pytest.raises(InputError, match="2 truth-check rows but 1 --picked-by"):
        run_selection_study([_row("a", (1, 1), (1, 1), 2), _row("b", (1, 1), (1, 1), 2)], ["cdmpp"])
