"""Zoo architectures that ``transformers`` lacks, written in plain torch (random weights).

Each class cites the paper it follows; sizes are the paper's base variant unless its
docstring says otherwise.
"""

from __future__ import annotations

import torch
from torch import nn


# ---------------------------------------------------------------- classic CNNs
class VGG(nn.Module):
    """VGG (Simonyan & Zisserman 2015); the default configuration is VGG-16 (D)."""

    CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, cfg=CFG, num_classes: int = 1000):
        super().__init__()
        layers, cin = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, padding=1), nn.ReLU()]
                cin = v
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                        nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 7), 1))


class AlexNet(nn.Module):
    """AlexNet (Krizhevsky et al. 2012), torchvision's single-tower variant."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, 4, 2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(), nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2),
        )
        self.classifier = nn.Sequential(nn.Linear(256 * 6 * 6, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                                        nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 6), 1))


class _Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 (Iandola et al. 2016; the 1.1 layout of its reference code)."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, 2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(64, 16, 64), _Fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(128, 32, 128), _Fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            _Fire(256, 48, 192), _Fire(384, 48, 192), _Fire(384, 64, 256), _Fire(512, 64, 256),
        )
        self.classifier = nn.Sequential(nn.Conv2d(512, num_classes, 1), nn.ReLU())

    def forward(self, x):
        return torch.flatten(nn.functional.adaptive_avg_pool2d(self.classifier(self.features(x)), 1), 1)


def _channel_shuffle(x, groups: int):
    b, c, h, w = x.shape
    return x.reshape(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class _ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.stride = stride
        branch = cout // 2
        if stride > 1:
            self.left = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(),
            )
        rin = cin if stride > 1 else branch
        self.right = nn.Sequential(
            nn.Conv2d(rin, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False), nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, bias=False), nn.BatchNorm2d(branch), nn.ReLU(),
        )

    def forward(self, x):
        if self.stride > 1:
            out = torch.cat([self.left(x), self.right(x)], 1)
        else:
            a, b = x.chunk(2, dim=1)
            out = torch.cat([a, self.right(b)], 1)
        return _channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNet V2 1.0x (Ma et al. 2018, Table 5)."""

    def __init__(self, stages=(116, 232, 464), repeats=(4, 8, 4), num_classes: int = 1000):
        super().__init__()
        layers = [nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 24
        for c, n in zip(stages, repeats):
            for i in range(n):
                layers.append(_ShuffleUnit(cin, c, 2 if i == 0 else 1))
                cin = c
        layers += [nn.Conv2d(cin, 1024, 1, bias=False), nn.BatchNorm2d(1024), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


class _InceptionV1(nn.Module):
    def __init__(self, cin, c1, c3r, c3, c5r, c5, pool):
        super().__init__()
        relu = nn.ReLU
        self.b1 = nn.Sequential(nn.Conv2d(cin, c1, 1), relu())
        self.b3 = nn.Sequential(nn.Conv2d(cin, c3r, 1), relu(), nn.Conv2d(c3r, c3, 3, padding=1), relu())
        self.b5 = nn.Sequential(nn.Conv2d(cin, c5r, 1), relu(), nn.Conv2d(c5r, c5, 5, padding=2), relu())
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(cin, pool, 1), relu())

    def forward(self, x):
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], 1)


class GoogLeNet(nn.Module):
    """GoogLeNet / Inception v1 (Szegedy et al. 2015, Table 1), without the auxiliary heads."""

    def __init__(self, num_classes: int = 1000):
        super().__init__()
        i = _InceptionV1
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1), nn.Conv2d(64, 64, 1), nn.ReLU(),
            nn.Conv2d(64, 192, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
            i(192, 64, 96, 128, 16, 32, 32), i(256, 128, 128, 192, 32, 96, 64), nn.MaxPool2d(3, 2, 1),
            i(480, 192, 96, 208, 16, 48, 64), i(512, 160, 112, 224, 24, 64, 64), i(512, 128, 128, 256, 24, 64, 64),
            i(512, 112, 144, 288, 32, 64, 64), i(528, 256, 160, 320, 32, 128, 128), nn.MaxPool2d(3, 2, 1),
            i(832, 256, 160, 320, 32, 128, 128), i(832, 384, 192, 384, 48, 128, 128),
        )
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


# ------------------------------------------------------------ dense prediction
class _DilatedBottleneck(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int, dilation: int):
        super().__init__()
        cout = planes * 4
        self.body = nn.Sequential(
            nn.Conv2d(cin, planes, 1, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, planes, 3, stride, dilation, dilation, bias=False), nn.BatchNorm2d(planes), nn.ReLU(),
            nn.Conv2d(planes, cout, 1, bias=False), nn.BatchNorm2d(cout),
        )
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return nn.functional.relu(self.body(x) + (x if self.down is None else self.down(x)))


class DeepLabV3(nn.Module):
    """DeepLab v3 (Chen et al. 2017): a ResNet-50 backbone at output stride 8 (dilation 2
    and 4 in its last two stages) and atrous spatial pyramid pooling (rates 12, 24, 36),
    upsampled bilinearly to the input size; 21 classes."""

    def __init__(self, num_classes: int = 21):
        super().__init__()
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        cin = 64
        for i, (n, stride, dil) in enumerate([(3, 1, 1), (4, 2, 1), (6, 1, 2), (3, 1, 4)]):
            for j in range(n):
                layers.append(_DilatedBottleneck(cin, 64 * 2**i, stride if j == 0 else 1, dil))
                cin = 64 * 2**i * 4
        self.backbone = nn.Sequential(*layers)
        self.aspp = nn.ModuleList(
            [nn.Sequential(nn.Conv2d(cin, 256, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU())]
            + [nn.Sequential(nn.Conv2d(cin, 256, 3, padding=r, dilation=r, bias=False), nn.BatchNorm2d(256), nn.ReLU())
               for r in (12, 24, 36)]
        )
        self.pool = nn.Sequential(nn.Conv2d(cin, 256, 1, bias=False), nn.ReLU())
        self.project = nn.Sequential(nn.Conv2d(5 * 256, 256, 1, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
                                     nn.Conv2d(256, 256, 3, padding=1, bias=False), nn.BatchNorm2d(256), nn.ReLU(),
                                     nn.Conv2d(256, num_classes, 1))

    def forward(self, x):
        size = x.shape[-2:]
        f = self.backbone(x)
        pooled = self.pool(f.mean((2, 3), keepdim=True)).expand(-1, -1, f.shape[2], f.shape[3])
        y = self.project(torch.cat([m(f) for m in self.aspp] + [pooled], 1))
        return nn.functional.interpolate(y, size=size, mode="bilinear", align_corners=False)


class UNet(nn.Module):
    """U-Net (Ronneberger et al. 2015) with padded convolutions and batch norm, base width
    32: max-pool down path, transposed-convolution (2x2, stride 2) up path, skip concatenations."""

    def __init__(self, cin: int = 3, base: int = 32, depth: int = 4, classes: int = 2):
        super().__init__()

        def double(a, b):
            return nn.Sequential(nn.Conv2d(a, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU(),
                                 nn.Conv2d(b, b, 3, padding=1, bias=False), nn.BatchNorm2d(b), nn.ReLU())

        widths = [base * 2**i for i in range(depth + 1)]
        self.down = nn.ModuleList([double(cin, widths[0])] + [double(widths[i], widths[i + 1]) for i in range(depth)])
        self.up = nn.ModuleList(nn.ConvTranspose2d(widths[i + 1], widths[i], 2, 2) for i in reversed(range(depth)))
        self.merge = nn.ModuleList(double(2 * widths[i], widths[i]) for i in reversed(range(depth)))
        self.out = nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else nn.functional.max_pool2d(x, 2))
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], 1))
        return self.out(x)


class ConvAutoencoder(nn.Module):
    """A convolutional autoencoder (Masci et al. 2011 style): strided 3x3 convolutions down to
    1/16 of the input, then transposed 3x3 convolutions (stride 2, output padding 1) back up."""

    def __init__(self, widths=(32, 64, 128, 256)):
        super().__init__()
        enc, cin = [], 3
        for w in widths:
            enc += [nn.Conv2d(cin, w, 3, 2, 1), nn.BatchNorm2d(w), nn.LeakyReLU(0.2)]
            cin = w
        dec = []
        for w in list(reversed(widths))[1:] + [3]:
            dec += [nn.ConvTranspose2d(cin, w, 3, 2, 1, output_padding=1), nn.BatchNorm2d(w), nn.LeakyReLU(0.2)]
            cin = w
        self.encoder, self.decoder = nn.Sequential(*enc), nn.Sequential(*dec[:-2], nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


# ------------------------------------------------------------------- diffusion
class _ResBlock(nn.Module):
    """A diffusion U-Net residual block: GroupNorm, SiLU, 3x3 conv, time embedding added."""

    def __init__(self, cin: int, cout: int, temb: int):
        super().__init__()
        self.n1, self.c1 = nn.GroupNorm(32, cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.t = nn.Linear(temb, cout)
        self.n2, self.c2 = nn.GroupNorm(32, cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, t):
        h = self.c1(nn.functional.silu(self.n1(x))) + self.t(t)[:, :, None, None]
        return self.skip(x) + self.c2(nn.functional.silu(self.n2(h)))


class _SpatialAttention(nn.Module):
    def __init__(self, c: int, heads: int = 8):
        super().__init__()
        self.norm, self.heads = nn.GroupNorm(32, c), heads
        self.qkv, self.proj = nn.Conv2d(c, 3 * c, 1), nn.Conv2d(c, c, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, self.heads, c // self.heads, h * w).unbind(1)
        att = torch.softmax(q.transpose(-1, -2) @ k * (c // self.heads) ** -0.5, dim=-1)
        return x + self.proj((v @ att.transpose(-1, -2)).reshape(b, c, h, w))


class DiffusionUNet(nn.Module):
    """A DDPM-style U-Net (Ho et al. 2020; Rombach et al. 2022's latent layout): 4 latent
    channels in, widths 128-256-512, one residual block per level, self-attention at the
    two coarser levels, nearest upsampling; the timestep is a fixed sinusoidal embedding."""

    def __init__(self, cin: int = 4, widths=(128, 256, 512), temb: int = 512):
        super().__init__()
        self.register_buffer("temb0", torch.randn(1, widths[0]))
        self.time = nn.Sequential(nn.Linear(widths[0], temb), nn.SiLU(), nn.Linear(temb, temb))
        self.inp = nn.Conv2d(cin, widths[0], 3, padding=1)
        self.down = nn.ModuleList()
        c = widths[0]
        for i, w in enumerate(widths):
            self.down.append(nn.ModuleList([_ResBlock(c, w, temb), _SpatialAttention(w) if i else nn.Identity()]))
            c = w
        self.mid = _ResBlock(c, c, temb)
        self.up = nn.ModuleList()
        for i, w in reversed(list(enumerate(widths))):
            self.up.append(nn.ModuleList([_ResBlock(c + w, w, temb), _SpatialAttention(w) if i else nn.Identity()]))
            c = w
        self.out = nn.Sequential(nn.GroupNorm(32, c), nn.SiLU(), nn.Conv2d(c, cin, 3, padding=1))

    def forward(self, x):
        t = self.time(self.temb0).expand(x.shape[0], -1)
        x, skips = self.inp(x), []
        for i, (res, att) in enumerate(self.down):
            x = att(res(x, t))
            skips.append(x)
            if i < len(self.down) - 1:
                x = nn.functional.avg_pool2d(x, 2)
        x = self.mid(x, t)
        for i, (res, att) in enumerate(self.up):
            if i:
                x = nn.functional.interpolate(x, scale_factor=2.0, mode="nearest")
            x = att(res(torch.cat([x, skips.pop()], 1), t))
        return self.out(x)
