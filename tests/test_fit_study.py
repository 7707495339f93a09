"""The fit study saves every finished lever and resumes from its output file."""

import argparse
import json

import pytest

from cdmpp.bench import fit_study
from cdmpp.errors import InputError


def _args(dataset, out, levers, seed=0, fresh=False):
    parser = argparse.ArgumentParser()
    fit_study.add_arguments(parser)
    argv = ["-d", str(dataset), "--levers", *levers, "--epochs", "1", "--no-trees", "--seed", str(seed),
            "--cache", str(out.parent / "cache"), "-o", str(out)]
    return parser.parse_args(argv + (["--fresh"] if fresh else []))


def test_a_study_resumes_from_its_output_and_keeps_finished_levers(two_device_dataset, tmp_path, monkeypatch):
    out = tmp_path / "study.json"
    assert fit_study.main(_args(two_device_dataset, out, ["huber"])) == 0
    first = json.loads(out.read_text())
    assert [(r["lever"], r["part"]) for r in first["rows"]] == [("huber", "fit"), ("huber", "validation")]
    assert out.with_suffix(".md").exists()

    said = []
    monkeypatch.setattr("builtins.print", lambda *a, **k: said.append(" ".join(map(str, a))))
    monkeypatch.chdir(two_device_dataset.parent)  # the same folders, by a relative path
    assert fit_study.main(_args(two_device_dataset.relative_to(two_device_dataset.parent), out,
                                ["huber", "current"])) == 0
    second = json.loads(out.read_text())
    levers = [r["lever"] for r in second["rows"]]
    assert levers == ["huber", "huber", "current", "current"]
    # the finished lever is kept as it was (its training seconds too), not trained again
    assert second["rows"][:2] == first["rows"]
    assert any("resuming: huber already scored" in line for line in said)


def test_a_study_refuses_to_resume_onto_another_split(two_device_dataset, tmp_path):
    out = tmp_path / "study.json"
    assert fit_study.main(_args(two_device_dataset, out, ["huber"])) == 0
    with pytest.raises(InputError, match="another split"):
        fit_study.main(_args(two_device_dataset, out, ["huber"], seed=1))
    # --fresh starts again and replaces the file
    assert fit_study.main(_args(two_device_dataset, out, ["current"], seed=1, fresh=True)) == 0
    assert {r["lever"] for r in json.loads(out.read_text())["rows"]} == {"current"}
