import pytest

from cdmpp import networks


def test_zoo_names_families_and_reserved():
    names = networks.network_names()
    assert {"resnet_50-b1", "mobilenet_v2-b1", "bert_base-b1s128"} <= set(names)
    assert not any(n.startswith(networks.RESERVED_FAMILIES) for n in names)
    spec = networks.get_network("bert_tiny-b4s64")
    assert spec.family == "bert" and spec.example_inputs()[0].shape == (4, 64)
    with pytest.raises(KeyError, match="reserved"):
        networks.get_network("convnext_tiny-b1")
    with pytest.raises(KeyError, match="unknown network"):
        networks.get_network("alexnet")


def test_a_network_lowers_to_tuning_tasks():
    from cdmpp.collect import extract_network_tasks
    from cdmpp.tvm_compat import Target

    tasks = extract_network_tasks("dcgan-b1", Target({"kind": "llvm", "num-cores": 1}))
    assert len(tasks) == 5 and all(t.weight >= 1 and t.flops > 0 for t in tasks)


@pytest.mark.parametrize("name", ["mobilenet_v3-b1", "efficientnet_b0-b1", "densenet_121-b1", "inception_v3-b4"])
def test_cnn_definitions_run(name):
    import torch

    spec = networks.get_network(name)
    with torch.no_grad():
        out = spec.build().eval()(*spec.example_inputs())
    assert out.shape == (spec.input_shape[0], 1000)


def test_zoo_spans_54_architectures_at_two_shapes_each_with_its_source():
    archs = networks.architectures()
    assert len(archs) >= 54 and all(len(entries) >= 2 for entries in archs.values())
    specs = [networks.get_network(n) for n in networks.network_names()]
    assert all(s.source for s in specs)
    assert sum(s.source.startswith("transformers.") for s in specs) >= 2 * 30  # built from transformers configs
    assert networks.get_network("swin_tiny-b1").source == "transformers.SwinModel (SwinConfig)"
    assert networks.get_network("vgg_16-b1").source == "cdmpp.networks.extra.VGG"
    assert len({s.family for s in specs}) >= 40
    with pytest.raises(KeyError, match="reserved"):
        networks.get_network("llama_1024-b1s128")


@pytest.mark.parametrize("name,out_shape", [("electra_small-b1s128", (1, 128, 256)), ("dlrm-b256", (256, 1)),
                                            ("pointnet-b8", (8, 40)), ("whisper_tiny_encoder-b1", (1, 1500, 384))])
def test_new_architectures_run_forward(name, out_shape):
    import torch

    spec = networks.get_network(name)
    with torch.no_grad():
        out = spec.build().eval()(*spec.example_inputs())
    assert tuple(out.shape) == out_shape


def test_networks_command_lists_sources_and_counts_architectures(capsys):
    from cdmpp.cli import main

    assert main(["networks"]) == 0
    out = capsys.readouterr().out
    assert "transformers.DeiTModel (DeiTConfig)" in out and "cdmpp.networks.extra.DiffusionUNet" in out
    n_archs = int(out.strip().splitlines()[-1].split(" networks of ")[1].split()[0])
    assert n_archs == len(networks.architectures()) >= 54
