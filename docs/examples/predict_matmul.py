"""Predict the latency of sampled schedules of a matmul on a device the shipped checkpoint knows.

    python docs/examples/predict_matmul.py [--device cpu-amd_epyc-znver4-avx512]
"""

import argparse

from tvm import te

import cdmpp
from cdmpp.collect import sample_schedules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu-amd_epyc-znver4-avx512", help="a device id the checkpoint knows (its model card lists them)")
    args = parser.parse_args()

    a = te.placeholder((512, 512), name="A")
    b = te.placeholder((512, 512), name="B")
    k = te.reduce_axis((0, 512), name="k")
    c = te.compute((512, 512), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    workload = te.create_prim_func([a, b, c])

    predictor = cdmpp.LatencyPredictor.load()  # the shipped checkpoint
    target = predictor.descriptor(args.device).target
    schedules = sample_schedules(workload, target, count=8, seed=0)  # MetaSchedule's random schedules
    seconds = predictor.predict(schedules, device=args.device)  # float64 array, seconds
    for i, s in enumerate(seconds):
        print(f"schedule {i}: {s * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
