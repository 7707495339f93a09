"""The zoo's first architectures, written in plain torch: the ResNet, MobileNet,
EfficientNet, DenseNet, Inception, DCGAN and ViT families, and BERT from a
``transformers`` config."""

from __future__ import annotations

import torch
from torch import nn


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


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: type | None = nn.ReLU) -> nn.Sequential:
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    return nn.Sequential(*layers, act()) if act is not None else nn.Sequential(*layers)


class _SqueezeExcite(nn.Module):
    def __init__(self, chans: int, squeeze: int, gate: type = nn.Sigmoid, act: type = nn.ReLU):
        super().__init__()
        self.fc1 = nn.Conv2d(chans, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, chans, 1)
        self.act, self.gate = act(), gate()

    def forward(self, x):
        s = nn.functional.adaptive_avg_pool2d(x, 1)
        return x * self.gate(self.fc2(self.act(self.fc1(s))))


class _MBConv(nn.Module):
    """Inverted residual with optional squeeze-excitation (MobileNetV3, EfficientNet)."""

    def __init__(self, cin, hidden, cout, k, stride, se: int, act: type, gate: type, se_act: type):
        super().__init__()
        layers = [] if hidden == cin else [_conv_bn(cin, hidden, 1, act=act)]
        layers.append(_conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se:
            layers.append(_SqueezeExcite(hidden, se, gate, se_act))
        layers.append(_conv_bn(hidden, cout, 1, act=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


def _make_divisible(v: float, divisor: int = 8) -> int:
    return max(divisor, int(v + divisor / 2) // divisor * divisor)


class MobileNetV3(nn.Module):
    """MobileNetV3-Large (Howard et al. 2019), width multiplier 1.0."""

    # kernel, expanded, out, squeeze-excite, hard-swish, stride
    CFG = [
        (3, 16, 16, False, False, 1), (3, 64, 24, False, False, 2), (3, 72, 24, False, False, 1),
        (5, 72, 40, True, False, 2), (5, 120, 40, True, False, 1), (5, 120, 40, True, False, 1),
        (3, 240, 80, False, True, 2), (3, 200, 80, False, True, 1), (3, 184, 80, False, True, 1),
        (3, 184, 80, False, True, 1), (3, 480, 112, True, True, 1), (3, 672, 112, True, True, 1),
        (5, 672, 160, True, True, 2), (5, 960, 160, True, True, 1), (5, 960, 160, True, True, 1),
    ]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)], 16
        for k, exp, out, se, hs, s in self.CFG:
            sq = _make_divisible(exp // 4) if se else 0
            layers.append(_MBConv(cin, exp, out, k, s, sq, nn.Hardswish if hs else nn.ReLU, nn.Hardsigmoid, nn.ReLU))
            cin = out
        layers.append(_conv_bn(cin, 960, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(960, 1280), nn.Hardswish(), nn.Linear(1280, num_classes))

    def forward(self, x):
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class EfficientNetB0(nn.Module):
    """EfficientNet-B0 (Tan & Le 2019)."""

    # expand ratio, kernel, stride, out, repeats
    CFG = [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3), (6, 5, 1, 112, 3),
           (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        layers, cin = [_conv_bn(3, 32, 3, 2, act=nn.SiLU)], 32
        for e, k, s, out, n in self.CFG:
            for i in range(n):
                layers.append(_MBConv(cin, cin * e, out, k, s if i == 0 else 1, max(1, cin // 4), nn.SiLU, nn.Sigmoid, nn.SiLU))
                cin = out
        layers.append(_conv_bn(cin, 1280, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class _DenseLayer(nn.Module):
    def __init__(self, cin: int, growth: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin), nn.ReLU(), nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, 1, 1, bias=False),
        )

    def forward(self, x):
        return torch.cat([x, self.body(x)], 1)


class DenseNet(nn.Module):
    """DenseNet-BC (Huang et al. 2017); ``(6, 12, 24, 16)`` is DenseNet-121."""

    def __init__(self, blocks=(6, 12, 24, 16), growth: int = 32, num_classes: int = 1000):
        super().__init__()
        layers, c = [_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1)], 64
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(_DenseLayer(c, growth))
                c += growth
            if i < len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, c // 2, 1, bias=False), nn.AvgPool2d(2, 2)]
                c //= 2
        layers += [nn.BatchNorm2d(c), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 1), 1))


class _InceptionA(nn.Module):
    def __init__(self, cin: int, pool: int):
        super().__init__()
        self.b1 = _conv_bn(cin, 64, 1)
        self.b5 = nn.Sequential(_conv_bn(cin, 48, 1), _conv_bn(48, 64, 5))
        self.b3 = nn.Sequential(_conv_bn(cin, 64, 1), _conv_bn(64, 96, 3), _conv_bn(96, 96, 3))
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), _conv_bn(cin, pool, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b5(x), self.b3(x), self.bp(x)], 1)


class _Conv1x7(nn.Module):
    def __init__(self, cin: int, cout: int, horizontal: bool):
        super().__init__()
        k, p = ((1, 7), (0, 3)) if horizontal else ((7, 1), (3, 0))
        self.conv = nn.Sequential(nn.Conv2d(cin, cout, k, 1, p, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    def forward(self, x):
        return self.conv(x)


class _InceptionC(nn.Module):
    def __init__(self, cin: int, c7: int):
        super().__init__()
        self.b1 = _conv_bn(cin, 192, 1)
        self.b7 = nn.Sequential(_conv_bn(cin, c7, 1), _Conv1x7(c7, c7, True), _Conv1x7(c7, 192, False))
        self.b77 = nn.Sequential(
            _conv_bn(cin, c7, 1), _Conv1x7(c7, c7, False), _Conv1x7(c7, c7, True),
            _Conv1x7(c7, c7, False), _Conv1x7(c7, 192, True),
        )
        self.bp = nn.Sequential(nn.AvgPool2d(3, 1, 1), _conv_bn(cin, 192, 1))

    def forward(self, x):
        return torch.cat([self.b1(x), self.b7(x), self.b77(x), self.bp(x)], 1)


class InceptionV3(nn.Module):
    """Inception-v3 (Szegedy et al. 2016), input 299x299: stem, 3 A, reduction, 4 C blocks.

    The last reduction and the two E blocks are folded into one strided 3x3 conv: the
    tuning tasks it yields keep the architecture's characteristic operators (1x7/7x1
    convs, 5x5 convs, average pools, channel concatenation) at a smaller task count.
    """

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(
            _conv_bn(3, 32, 3, 2), _conv_bn(32, 32, 3), _conv_bn(32, 64, 3), nn.MaxPool2d(3, 2),
            _conv_bn(64, 80, 1), _conv_bn(80, 192, 3), nn.MaxPool2d(3, 2),
        )
        self.a = nn.Sequential(_InceptionA(192, 32), _InceptionA(256, 64), _InceptionA(288, 64))
        self.reduce = _conv_bn(288, 768, 3, 2)
        self.c = nn.Sequential(_InceptionC(768, 128), _InceptionC(768, 160), _InceptionC(768, 160), _InceptionC(768, 192))
        self.tail = _conv_bn(768, 2048, 3, 2)
        self.fc = nn.Linear(2048, num_classes)

    def forward(self, x):
        x = self.tail(self.c(self.reduce(self.a(self.stem(x)))))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


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
    from transformers import BertConfig, BertModel  # noqa: PLC0415  (keeps transformers off this module's import)

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
