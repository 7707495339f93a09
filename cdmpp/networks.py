"""The network zoo: architectures defined in code (no weights), as TenSet does.

Each :class:`NetworkSpec` names an architecture and one input shape.  Weights are
random: task extraction and measurement depend on shapes only.  The ConvNeXt and
GPT-2 families are reserved as unseen test networks and are not in the zoo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

RESERVED_FAMILIES = ("convnext", "gpt2")


# --------------------------------------------------------------------------- CNNs
class _Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int, groups: int, base_width: int):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        cout = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + idt)


class _Basic(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int, groups: int, base_width: int):
        super().__init__()
        del groups, base_width
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.down = None
        if stride != 1 or cin != planes:
            self.down = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + idt)


class ResNet(nn.Module):
    """ResNet / ResNeXt / Wide-ResNet (He et al. 2016; Xie et al. 2017; Zagoruyko 2016)."""

    def __init__(self, block, layers, groups: int = 1, width_per_group: int = 64, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], 64
        for i, n in enumerate(layers):
            planes = 64 * 2**i
            for j in range(n):
                blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1, groups, width_per_group))
                cin = planes * block.expansion
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int):
        super().__init__()
        hidden = cin * expand
        layers = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    """MobileNetV2 (Sandler et al. 2018), width multiplier 1.0."""

    CFG = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()]
        cin = 32
        for t, c, n, s in self.CFG:
            for i in range(n):
                layers.append(_InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += [nn.Conv2d(cin, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class DCGANGenerator(nn.Module):
    """DCGAN generator (Radford et al. 2016): latent (N, nz, 1, 1) -> image (N, 3, 64, 64)."""

    def __init__(self, nz: int = 100, ngf: int = 64):
        super().__init__()
        chans = [nz, ngf * 8, ngf * 4, ngf * 2, ngf]
        layers = []
        for i in range(4):
            layers += [
                nn.ConvTranspose2d(chans[i], chans[i + 1], 4, 1 if i == 0 else 2, 0 if i == 0 else 1, bias=False),
                nn.BatchNorm2d(chans[i + 1]),
                nn.ReLU(),
            ]
        layers += [nn.ConvTranspose2d(ngf, 3, 4, 2, 1, bias=False), nn.Tanh()]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z)


# -------------------------------------------------------------------- transformers
class _EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln1 = nn.LayerNorm(dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp)
        self.fc2 = nn.Linear(mlp, dim)

    def forward(self, x):
        b, n, d = x.shape
        h = self.ln1(x)
        q, k, v = self.qkv(h).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class ViT(nn.Module):
    """Vision Transformer (Dosovitskiy et al. 2021), pre-norm encoder."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12, heads: int = 12):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.layers = nn.Sequential(*[_EncoderLayer(dim, heads, 4 * dim) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1000)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.ln(self.layers(x))[:, 0])


def _bert(hidden: int, layers: int, heads: int):
    from transformers import BertConfig, BertModel  # pylint: disable=import-outside-toplevel

    cfg = BertConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        attn_implementation="eager",
    )

    class _Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(cfg, add_pooling_layer=False)

        def forward(self, ids):
            return self.bert(input_ids=ids).last_hidden_state

    return _Bert()


# ------------------------------------------------------------------------ registry
@dataclass(frozen=True)
class NetworkSpec:
    """One zoo entry: an architecture at one input shape.

    Attributes:
        name: unique key, e.g. ``"resnet_50-b1"``.
        family: architecture family, e.g. ``"resnet"``; used for held-out splits.
        build: returns the ``torch.nn.Module`` (random weights).
        input_shape: shape of the single input tensor.
        input_dtype: ``"float32"`` for images/latents, ``"int64"`` for token ids.
    """

    name: str
    family: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    input_dtype: str = "float32"

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """One example input tuple for ``torch.export``."""
        if self.input_dtype == "int64":
            return (torch.zeros(self.input_shape, dtype=torch.int64),)
        return (torch.randn(self.input_shape),)


def _zoo() -> dict[str, NetworkSpec]:
    b, bb = _Bottleneck, _Basic
    archs = {
        "resnet_18": ("resnet", lambda: ResNet(bb, [2, 2, 2, 2]), "img"),
        "resnet_50": ("resnet", lambda: ResNet(b, [3, 4, 6, 3]), "img"),
        "resnext_50": ("resnext", lambda: ResNet(b, [3, 4, 6, 3], groups=32, width_per_group=4), "img"),
        "wide_resnet_50": ("wide_resnet", lambda: ResNet(b, [3, 4, 6, 3], width_per_group=128), "img"),
        "mobilenet_v2": ("mobilenet", MobileNetV2, "img"),
        "vit_b16": ("vit", ViT, "img"),
        "dcgan": ("dcgan", DCGANGenerator, "latent"),
        "bert_tiny": ("bert", lambda: _bert(128, 2, 2), "seq"),
        "bert_base": ("bert", lambda: _bert(768, 12, 12), "seq"),
        "bert_large": ("bert", lambda: _bert(1024, 24, 16), "seq"),
    }
    shapes = {
        "img": [((1, 3, 224, 224), "b1"), ((4, 3, 224, 224), "b4")],
        "latent": [((1, 100, 1, 1), "b1"), ((8, 100, 1, 1), "b8")],
        "seq": [((1, 128), "b1s128"), ((4, 64), "b4s64")],
    }
    zoo = {}
    for arch, (family, build, kind) in archs.items():
        for shape, tag in shapes[kind]:
            name = f"{arch}-{tag}"
            zoo[name] = NetworkSpec(name, family, build, shape, "int64" if kind == "seq" else "float32")
    return zoo


def network_names() -> list[str]:
    """Names of every network in the zoo, e.g. ``["resnet_18-b1", ...]``."""
    return list(_zoo())


def get_network(name: str) -> NetworkSpec:
    """Look up a zoo entry.

    Raises:
        KeyError: the name is not in the zoo (the message lists the valid names), or
            names a reserved unseen-test family (ConvNeXt, GPT-2).
    """
    zoo = _zoo()
    if name not in zoo:
        if any(name.lower().startswith(f) for f in RESERVED_FAMILIES):
            raise KeyError(f"network {name!r} belongs to a family reserved for unseen-network tests")
        raise KeyError(f"unknown network {name!r}; the zoo has: {', '.join(zoo)}")
    return zoo[name]
