import pytest

from cdmpp.cli import main


def test_collect_on_a_gpu_needs_one(tmp_path, capsys):
    import tvm

    if tvm.cuda(0).exist:
        pytest.skip("a CUDA GPU is visible here")
    assert main(["collect", "-n", "dcgan-b1", "-o", str(tmp_path), "--gpu"]) == 2
    assert "no CUDA GPU 0 visible" in capsys.readouterr().err
    assert main(["collect", "-n", "dcgan-b1", "-o", str(tmp_path), "--gpu", "--disable-avx512"]) == 2

def test_cli_prints_its_own_errors_in_one_line_and_keeps_other_tracebacks(tmp_path, capsys, monkeypatch):
    import pytest

    import cdmpp
    from cdmpp import cli

    assert main(["evaluate", "--dataset", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("cdmpp evaluate: error: dataset folder not found")
    with pytest.raises(cdmpp.DatasetError):  # --debug shows the traceback of the project's own errors
        main(["--debug", "evaluate", "--dataset", str(tmp_path / "nowhere")])
    with pytest.raises(cdmpp.UnknownNetworkError, match="unknown network 'no_such_net'"):
        main(["--debug", "collect", "-n", "no_such_net", "-o", str(tmp_path)])

    def boom(_args):
        raise RuntimeError("a bug")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["validate"].set_defaults(func=boom)  # pylint: disable=protected-access
    with pytest.raises(RuntimeError, match="a bug"):  # not the project's error: traceback kept
        main(["validate", str(tmp_path)])
    for name in ("CdmppError", "CheckpointError", "DatasetError", "InputError", "UnknownDeviceError",
                 "UnsupportedProgramError", "MachineBusyError", "DeviceUnavailableError"):
        assert issubclass(getattr(cdmpp, name), cdmpp.CdmppError)

def test_train_flags_reach_the_model_and_training_configs(capsys):
    from cdmpp.cli import build_parser
    from cdmpp.recipe_args import model_configs

    args = build_parser().parse_args(
        ["train", "-d", "x", "-o", "y", "--dropout", "0.2", "--ff-dim", "1024", "--device-dropout", "0.2",
         "--weight-decay", "0.01", "--no-trace-tokens", "--precision", "bf16-mixed"]
    )
    model, train = model_configs(args)
    assert (model.dropout, model.ff_dim, train.device_dropout, train.weight_decay) == (0.2, 1024, 0.2, 0.01)
    assert not model.trace_tokens and train.precision == "bf16-mixed"
    default_model, _ = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y"]))
    # unset flags keep the defaults: the shipped recipe
    assert default_model.dropout == 0.05 and default_model.ff_dim == 512 and default_model.trace_tokens
    assert default_model.loop_tokens and default_model.pooling == "lse"
    leaves, _ = model_configs(build_parser().parse_args(["train", "-d", "x", "-o", "y", "--no-loop-tokens"]))
    assert not leaves.loop_tokens
    assert main(["train", "-d", "x", "-o", "y", "--dropout", "1.5"]) == 2
    assert "dropout must be in [0, 1), got 1.5" in capsys.readouterr().err

def test_help_loads_neither_torch_nor_tvm():
    """``cdmpp --help`` builds the whole parser (every subcommand and the bench group, whose
    registration imports only ``benchmarks.cli``) without importing torch or TVM (what keeps
    it at about 0.5 s on 2 cores)."""
    import subprocess
    import sys

    code = ("import sys, contextlib, io\nfrom cdmpp.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['--help'])\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('torch', 'tvm', 'tvm_ffi', 'lightning', 'transformers', 'benchmarks.tune') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"

def test_bench_group_loads_the_checkouts_benchmarks_only_when_called(tmp_path):
    """``cdmpp bench`` lists the benches and runs one by name, from any working directory (the
    ``benchmarks`` package registers the group through an entry point); an unknown name
    exits 2 and names it; ``evaluate`` no longer trains a benchmark table."""
    import subprocess
    import sys

    def run(*argv):
        code = "import sys; from cdmpp.cli import main; sys.exit(main(sys.argv[1:]))"
        return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path)

    listed = run("bench", "--help")
    assert listed.returncode == 0 and "fit-study" in listed.stdout and "table" in listed.stdout
    unknown = run("bench", "no-such-bench")
    assert unknown.returncode == 2 and "no bench named 'no-such-bench'" in unknown.stderr
    one = run("bench", "table", "--help")
    assert one.returncode == 0 and "--no-random-split" in one.stdout and "cdmpp bench table" in one.stdout
    missing = run("bench", "repeat-check", "--device-dirs", str(tmp_path / "nowhere"))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert run("evaluate", "--benchmark").returncode == 2
