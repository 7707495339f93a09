"""The runnable examples of docs/examples/ that the README and the docs point to."""

import runpy
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_llama_decoder_example_builds_a_model_and_its_inputs():
    import torch

    build = runpy.run_path(str(ROOT / "docs" / "examples" / "llama_decoder.py"))["build"]
    model, inputs = build()
    with torch.no_grad():
        logits = model(*inputs)
    assert logits.shape == (1, 64, 1000)


def test_the_predict_example_prints_a_latency_per_sampled_schedule():
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "predict_matmul.py")],
                         capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if line.startswith("schedule ")]
    assert len(lines) == 8 and all(float(line.split()[-2]) > 0 for line in lines)
