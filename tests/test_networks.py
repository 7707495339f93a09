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


def test_zoo_spans_twelve_architectures_at_two_shapes():
    archs = {}
    for n in networks.network_names():
        arch, shape = n.split("-")
        archs.setdefault(arch, set()).add(shape)
    assert len(archs) >= 12 and all(len(s) >= 2 for s in archs.values())
