"""The network zoo: architectures defined in code (no weights), as TenSet does.

Each :class:`NetworkSpec` names an architecture and one input shape.  Weights are
random: task extraction and measurement depend on shapes only.  The architectures come
from three places, each entry naming its source:

- :mod:`.classic`: the first 14 architectures, in plain torch (BERT from a ``transformers`` config);
- :mod:`.hf`: architectures of the ``transformers`` package, built from their configs;
- :mod:`.extra` and :mod:`.other`: architectures that package lacks, in plain torch.

The ConvNeXt and GPT-2 families and LLaMA-style decoders (RMSNorm, SwiGLU, rotary
embeddings: LLaMA, Mistral, Qwen2, Gemma) are reserved as held-out test networks and are
not in the zoo (:mod:`.held_out` defines the test networks).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from cdmpp.errors import UnknownNetworkError

from . import classic, extra, other, sweep
from .hf import HF_ARCHS

RESERVED_FAMILIES = ("convnext", "gpt2", "llama", "mistral", "qwen", "gemma")

#: input kind -> ``(shape, name tag, dtype)`` of each input shape the zoo builds
INPUT_KINDS: dict[str, list[tuple[tuple[int, ...], str, str]]] = {
    "img": [((1, 3, 224, 224), "b1", "float32"), ((4, 3, 224, 224), "b4", "float32")],
    "img240": [((1, 3, 240, 240), "b1", "float32"), ((4, 3, 240, 240), "b4", "float32")],
    "img256": [((1, 3, 256, 256), "b1", "float32"), ((4, 3, 256, 256), "b4", "float32")],
    "img299": [((1, 3, 299, 299), "b1", "float32"), ((4, 3, 299, 299), "b4", "float32")],
    "img300": [((1, 3, 300, 300), "b1", "float32"), ((4, 3, 300, 300), "b4", "float32")],
    "latent": [((1, 100, 1, 1), "b1", "float32"), ((8, 100, 1, 1), "b8", "float32")],
    "seq": [((1, 128), "b1s128", "int64"), ((4, 64), "b4s64", "int64")],
    "seq512": [((1, 128), "b1s128", "int64"), ((1, 512), "b1s512", "int64")],
    "seq77": [((1, 77), "b1s77", "int64"), ((8, 77), "b8s77", "int64")],
    "seq35": [((1, 35), "b1s35", "int64"), ((20, 35), "b20s35", "int64")],
    "sd_latent": [((1, 4, 32, 32), "b1l32", "float32"), ((1, 4, 64, 64), "b1l64", "float32")],
    "seg": [((1, 3, 256, 256), "b1", "float32"), ((1, 3, 512, 512), "b1r512", "float32")],
    "video": [((1, 3, 8, 112, 112), "b1", "float32"), ((2, 3, 16, 112, 112), "b2f16", "float32")],
    "points": [((1, 3, 1024), "b1", "float32"), ((8, 3, 1024), "b8", "float32")],
    "wave": [((1, 1, 4096), "b1", "float32"), ((4, 1, 4096), "b4", "float32")],
    "audio": [((1, 16000), "b1s1", "float32"), ((1, 48000), "b1s3", "float32")],
    "mel": [((1, 80, 3000), "b1", "float32"), ((2, 80, 3000), "b2", "float32")],
    "ctr": [((1, 39), "b1", "int64"), ((256, 39), "b256", "int64")],
}


@dataclass(frozen=True)
class NetworkSpec:
    """One zoo entry: an architecture at one input shape.

    Attributes:
        name: unique key, e.g. ``"resnet_50-b1"``.
        family: architecture family, e.g. ``"resnet"``; used for held-out splits.
        build: returns the ``torch.nn.Module`` (random weights).
        input_shape: shape of the single input tensor.
        input_dtype: ``"float32"`` for images/latents/audio, ``"int64"`` for token ids.
        source: where the architecture is defined: ``"transformers.SwinModel (SwinConfig)"``
            or a class of :mod:`cdmpp.networks`.
    """

    name: str
    family: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    input_dtype: str = "float32"
    source: str = ""

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """One example input tuple for ``torch.export`` (token ids: zeros)."""
        if self.input_dtype == "int64":
            return (torch.zeros(self.input_shape, dtype=torch.int64),)
        return (torch.randn(self.input_shape),)


def _torch_archs() -> dict[str, tuple[str, Callable[[], nn.Module], str, str]]:
    """Plain-torch architectures: name -> (family, build, input kind, source)."""
    c, e, o = classic, extra, other
    b, bb = c._Bottleneck, c._Basic
    own = {
        "resnet_18": ("resnet", lambda: c.ResNet(bb, [2, 2, 2, 2]), "img", c.ResNet),
        "resnet_50": ("resnet", lambda: c.ResNet(b, [3, 4, 6, 3]), "img", c.ResNet),
        "resnext_50": ("resnext", lambda: c.ResNet(b, [3, 4, 6, 3], groups=32, width_per_group=4), "img", c.ResNet),
        "wide_resnet_50": ("wide_resnet", lambda: c.ResNet(b, [3, 4, 6, 3], width_per_group=128), "img", c.ResNet),
        "mobilenet_v2": ("mobilenet", c.MobileNetV2, "img", c.MobileNetV2),
        "mobilenet_v3": ("mobilenet", c.MobileNetV3, "img", c.MobileNetV3),
        "efficientnet_b0": ("efficientnet", c.EfficientNetB0, "img", c.EfficientNetB0),
        "densenet_121": ("densenet", c.DenseNet, "img", c.DenseNet),
        "inception_v3": ("inception", c.InceptionV3, "img299", c.InceptionV3),
        "vit_b16": ("vit", c.ViT, "img", c.ViT),
        "dcgan": ("dcgan", c.DCGANGenerator, "latent", c.DCGANGenerator),
        "bert_tiny": ("bert", lambda: c._bert(128, 2, 2), "seq", "transformers.BertModel (BertConfig)"),
        "bert_base": ("bert", lambda: c._bert(768, 12, 12), "seq", "transformers.BertModel (BertConfig)"),
        "bert_large": ("bert", lambda: c._bert(1024, 24, 16), "seq", "transformers.BertModel (BertConfig)"),
        # architectures that transformers lacks
        "vgg_16": ("vgg", e.VGG, "img", e.VGG),
        "alexnet": ("alexnet", e.AlexNet, "img", e.AlexNet),
        "squeezenet_1_1": ("squeezenet", e.SqueezeNet, "img", e.SqueezeNet),
        "shufflenet_v2": ("shufflenet", e.ShuffleNetV2, "img", e.ShuffleNetV2),
        "googlenet": ("inception", e.GoogLeNet, "img", e.GoogLeNet),
        "deeplab_v3": ("deeplab", e.DeepLabV3, "seg", e.DeepLabV3),
        "unet": ("unet", e.UNet, "seg", e.UNet),
        "conv_autoencoder": ("autoencoder", e.ConvAutoencoder, "img", e.ConvAutoencoder),
        "diffusion_unet": ("diffusion", e.DiffusionUNet, "sd_latent", e.DiffusionUNet),
        "mlp_mixer_b16": ("mlp_mixer", o.MLPMixer, "img", o.MLPMixer),
        "dlrm": ("dlrm", o.DLRM, "ctr", o.DLRM),
        "r2plus1d_18": ("video", o.R2Plus1D, "video", o.R2Plus1D),
        "pointnet": ("pointnet", o.PointNet, "points", o.PointNet),
        "wavenet": ("wavenet", o.WaveNet, "wave", o.WaveNet),
        "lstm_lm": ("lstm", o.LSTMTagger, "seq35", o.LSTMTagger),
    }
    return {
        arch: (family, build, kind, src if isinstance(src, str) else f"{src.__module__}.{src.__qualname__}")
        for arch, (family, build, kind, src) in own.items()
    }


def _zoo() -> dict[str, NetworkSpec]:
    archs = _torch_archs()
    for a in HF_ARCHS:
        archs[a.arch] = (a.family, a.build, a.kind, a.source)
    zoo = {}
    for arch, (family, build, kind, source) in archs.items():
        for shape, tag, dtype in INPUT_KINDS[kind]:
            name = f"{arch}-{tag}"
            zoo[name] = NetworkSpec(name, family, build, shape, dtype, source)
    return zoo


def network_names() -> list[str]:
    """Names of every network in the zoo, e.g. ``["resnet_18-b1", ...]``."""
    return list(_zoo())


def architectures() -> dict[str, list[str]]:
    """The zoo's architectures (a network name without its shape tag), each with its entries."""
    out: dict[str, list[str]] = {}
    for name in _zoo():
        out.setdefault(name.rsplit("-", 1)[0], []).append(name)
    return out


def family_of(network: str) -> str:
    """The zoo family of a network; a network outside the zoo is its own family (its name
    without the shape tag)."""
    try:
        return get_network(network).family
    except UnknownNetworkError:
        return network.rsplit("-", 1)[0]


def get_network(name: str) -> NetworkSpec:
    """Look up a zoo entry, or an entry of the operator sweep (``sweep-...``,
    :mod:`cdmpp.networks.sweep`, rebuilt from its name).

    Raises:
        UnknownNetworkError: the name is not in the zoo (the message lists the valid names),
            names a reserved held-out test family (ConvNeXt, GPT-2, LLaMA-style decoders), or
            is a malformed sweep name.
    """
    if name.startswith(sweep.PREFIX):
        return NetworkSpec(name, sweep.FAMILY, *sweep.sweep_entry(name))
    zoo = _zoo()
    if name not in zoo:
        if any(name.lower().startswith(f) for f in RESERVED_FAMILIES):
            raise UnknownNetworkError(f"network {name!r} belongs to a family reserved for the held-out test networks")
        raise UnknownNetworkError(f"unknown network {name!r}; the zoo has: {', '.join(zoo)}")
    return zoo[name]
