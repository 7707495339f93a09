"""One model over several devices: the device table, the API's device rule, adapt."""

import json

import numpy as np
import pytest
from support import AVX2


@pytest.mark.measures
def test_adapt_times_real_shots_and_writes_a_checkpoint_that_knows_this_machine(
    device_checkpoint, two_device_dataset, tmp_path, capsys
):
    from cdmpp import dataset as ds
    from cdmpp.cli import main
    from cdmpp.device import local_cpu
    from cdmpp.predictor import LatencyPredictor

    out = tmp_path / "adapted"
    argv = ["adapt", "-c", str(device_checkpoint[0]), "-s", str(two_device_dataset / AVX2), "-o", str(out),
            "--measured", str(tmp_path / "measured"), "--shots", "3", "--candidates", "12",
            "--cache", str(tmp_path / "cache")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    here = local_cpu().device_id
    assert here in printed and "checkpoint written" in printed
    p = LatencyPredictor.load(out)
    assert here in p.devices
    measured = ds.load_device_dir(tmp_path / "measured" / here)
    assert 1 <= len(measured.programs) <= 3
    lat = p.predict([q.record for q in measured.programs], device=here)
    assert np.all(np.isfinite(lat)) and np.all(lat > 0)
    entry = next(d for d in json.loads((out / "config.json").read_text())["metadata"]["devices"] if d["device_id"] == here)
    assert entry["adapted"]["shots"] == len(measured.programs)
