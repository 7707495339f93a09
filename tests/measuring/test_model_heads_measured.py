"""The log-sum-exp head: a latency term per token, summed as times add up."""



def test_train_with_the_lse_head(tiny_collection, tmp_path):
    from cdmpp.checkpoint import load_checkpoint
    from cdmpp.cli import main

    _, summary = tiny_collection
    out = tmp_path / "ckpt"
    args = ["train", "-d", str(summary.device_dir), "--holdout", "none", "-o", str(out), "--no-wandb", "--epochs", "1",
            "--d-model", "16", "--layers", "1", "--cache", str(tmp_path / "c"), "--no-trace-tokens", "--pooling", "lse"]
    assert main(args) == 0
    model, _ = load_checkpoint(out)
    assert model.config.pooling == "lse"
    head = (out / "README.md").read_text().split("\n\n")[1]  # the card's architecture sentence
    assert "log-sum-exp" in head and "pooled" not in head
