"""Networks outside the zoo: defined, not in the zoo, their tasks extracted and picked."""

import pytest
import torch

from benchmarks.held_out import held_out_network, held_out_networks, held_out_tasks_of
from benchmarks.tune import pick_tasks
from cdmpp.errors import InputError, UnknownNetworkError
from cdmpp.networks import get_network, network_names


def test_held_out_networks_are_outside_the_zoo_and_a_bad_name_is_refused():
    assert not set(held_out_networks()) & set(network_names())
    for name in held_out_networks():
        with pytest.raises(UnknownNetworkError, match="reserved"):
            get_network(name)
    with pytest.raises(UnknownNetworkError, match="convnext_tiny-b1"):
        held_out_network("resnet_50-b1")
    out = held_out_network("convnext_tiny-b1").build()(torch.randn(1, 3, 224, 224))
    assert out.shape == (1, 1000)


def test_convnext_tasks_are_ranked_by_weight_times_flops_and_picked_by_prefix():
    from cdmpp.tvm_compat import Target

    ranked = held_out_tasks_of("convnext_tiny-b1", Target({"kind": "llvm", "num-cores": 1}))
    assert [t.rank for t in ranked] == list(range(len(ranked)))
    # stage 3 holds 9 of ConvNeXt-T's 18 blocks: its MLP matmuls and depthwise conv occur 9 times
    assert ranked[0].weight == 9 and ranked[0].name.startswith("fused_matmul")
    dw = [t for t in ranked if t.name.startswith("fused_conv2d") and t.weight == 9]
    assert len(dw) == 1
    prefix = dw[0].name.split("_add")[0]
    picked = pick_tasks(ranked, "convnext_tiny-b1", 1, (prefix,))
    assert [t.name for t in picked] == [ranked[0].name, dw[0].name]
    with pytest.raises(InputError, match="no task named conv99"):
        pick_tasks(ranked, "convnext_tiny-b1", 1, ("conv99",))


def test_the_llama_style_decoder_has_two_large_dense_layers_and_its_own_attention():
    from cdmpp.tvm_compat import Target

    ranked = held_out_tasks_of("llama_1024-b1s128", Target({"kind": "llvm", "num-cores": 1}))
    weights = {t.name: t.weight for t in ranked}
    # 8 blocks: gate and up (128x1024 -> 2816) twice per block, down (128x2816 -> 1024) once
    assert ranked[0].name == "matmul2" and weights["matmul2"] == 16.0 and weights["matmul3"] == 8.0
    assert weights["matmul1"] == 16.0  # both attention batch-matmuls, heads of 128
    with pytest.raises(UnknownNetworkError, match="reserved"):
        get_network("llama_1024-b1s128")


def test_the_truth_check_loads_a_held_out_network_by_name_which_the_product_refuses():
    """``cdmpp bench truth-check -n llama_1024-b1s128`` can check a whole-network tune of a
    held-out test network; ``cdmpp estimate`` and ``cdmpp tune`` (``load_relax``) refuse it."""
    from benchmarks.truth_check import load_network
    from cdmpp.estimate import relax_tasks
    from cdmpp.network_input import load_relax
    from cdmpp.tvm_compat import Target

    target = Target({"kind": "llvm", "num-cores": 1})
    with pytest.raises(UnknownNetworkError, match="reserved"):
        load_relax("llama_1024-b1s128", target)
    net = load_network("llama_1024-b1s128", target)
    tasks = {t.name: t.weight for t in relax_tasks(net.mod, target)}
    assert net.name == "llama_1024-b1s128" and tasks["matmul2"] == 16.0 and "take" in tasks
    assert net.unfused is not None and net.params and net.example_inputs[0].shape == (1, 128)
