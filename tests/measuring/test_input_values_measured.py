"""``cdmpp bench input-values``: a work dir's erf workloads, each timed under every fill."""

from pathlib import Path

WORK_DIR = Path(__file__).resolve().parents[2] / "datasets/tuning/cpu-intel_xeon_processor-rocketlake-avx512/outside-zoo/convnext-cdmpp"


def test_each_erf_workload_of_a_work_dir_is_timed_under_every_fill():
    from benchmarks.input_values import FILLS, format_input_values, time_under_fills
    from cdmpp.estimate import work_dir_best

    erf = {k for k, (mod, _) in work_dir_best(WORK_DIR).items() if "T.erf(" in mod.script()}
    assert len(erf) == 4  # ConvNeXt's four GELU workloads, one per stage
    rows = time_under_fills([WORK_DIR], ("erf",), number=1, repeat=2)
    assert {r["workload_key"] for r in rows} == erf
    assert all(set(r["fills"]) == set(FILLS) and min(r["fills"].values()) > 0 for r in rows)
    assert "tvm / zeros" in format_input_values(rows, markdown=True)
    assert time_under_fills([WORK_DIR], ("no_such_intrinsic",)) == []
