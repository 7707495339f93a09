"""``cdmpp predict`` and ``cdmpp estimate``: the command-line twins of the Python API and of /estimate."""

import json

import pytest

from cdmpp.cli import main

NET_PY = '''
import torch


class Block(torch.nn.Module):
    """Not a zoo network: a 1x1 convolution, a ReLU, a global average and a reshape."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 1)

    def forward(self, x):
        return torch.relu(self.conv(x)).mean(dim=(2, 3)).reshape(1, 4, 4)


def build():
    return Block(), (torch.randn(1, 8, 14, 14),)


def not_a_model():
    return 3
'''

def test_predict_names_a_missing_database(tmp_path, capsys):
    assert main(["predict", "--work-dir", str(tmp_path)]) == 2
    assert "database_workload.json" in capsys.readouterr().err

def test_estimate_a_pytorch_network_outside_the_zoo_and_its_relax_json(tmp_path, capsys):
    from cdmpp.inference_cli import load_network
    from cdmpp.predictor import LatencyPredictor
    from cdmpp.relax_import import relax_module_from_torch
    from cdmpp.tvm_compat import Target, save_json

    (tmp_path / "net.py").write_text(NET_PY, encoding="utf-8")
    pred = LatencyPredictor.load()
    device = pred.devices[0]
    out = tmp_path / "est.json"
    assert main(["estimate", f"{tmp_path / 'net.py'}:build", "--device", device, "--samples", "2",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "total (sum of weight x latency)" in text
    est = json.loads(out.read_text())
    assert est["device"] == device and len(est["tasks"]) >= 1
    # the reshape runs as a view of the average in the deployed network: no kernel, left out of the total
    views = [t["task"] for t in est["tasks"] if t["view"]]
    assert len(views) == 1 and "reshape" in views[0], est["tasks"]
    assert "view: runs as a reshape of its input" in text
    assert est["total_s"] == pytest.approx(sum(t["weight"] * t["latency_s"] for t in est["tasks"] if not t["view"]))
    assert est["total_s"] < sum(t["weight"] * t["latency_s"] for t in est["tasks"])

    # the same network as a Relax module in TVM JSON gives the same tasks
    import importlib.util

    spec = importlib.util.spec_from_file_location("net", tmp_path / "net.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model, inputs = mod.build()
    target = Target(pred.descriptor(device).target)
    (tmp_path / "net.json").write_text(save_json(relax_module_from_torch(model, inputs, target)), encoding="utf-8")
    tasks, _ = load_network(str(tmp_path / "net.json"), target)
    assert sorted(t.name for t in tasks) == sorted(t["task"] for t in est["tasks"])

    assert main(["estimate", f"{tmp_path / 'net.py'}:not_a_model", "--device", device]) == 2

    # a second estimate in the same process reuses each task's chosen sampled schedule, featurized
    import cdmpp.estimate as estimate_mod

    kept = estimate_mod.SampledSchedules()
    first = estimate_mod.estimate_network(pred, tasks, device, target, cfg=estimate_mod.EstimateConfig(samples=2),
                                          sampled=kept)
    calls = []
    real = estimate_mod.sample_schedules
    estimate_mod.sample_schedules = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        again = estimate_mod.estimate_network(pred, tasks, device, target, cfg=estimate_mod.EstimateConfig(samples=2),
                                              sampled=kept)
    finally:
        estimate_mod.sample_schedules = real
    assert calls == [] and kept.hits == len(tasks)
    assert again.total_s == pytest.approx(first.total_s, rel=1e-5)
    assert [t.source_detail for t in again.tasks] == [t.source_detail for t in first.tasks]
    assert "must return (torch.nn.Module" in capsys.readouterr().err
    assert main(["estimate", str(tmp_path / "missing.json"), "--device", device]) == 2
    assert "no such file" in capsys.readouterr().err
