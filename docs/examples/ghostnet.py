"""A convolutional network outside the zoo, written as a user's own PyTorch code, given to
cdmpp as ``docs/examples/ghostnet.py:build``.

A GhostNet (Han et al., CVPR 2020) with random weights: each ghost module makes half its
output channels with a 1x1 convolution and the other half from them with a cheap 3x3
depthwise convolution; bottlenecks of two ghost modules, a strided depthwise convolution
where the resolution halves, squeeze-and-excitation in some; a 224x224 image at batch 1.
No zoo network is a GhostNet::

    cdmpp estimate docs/examples/ghostnet.py:build
    cdmpp tune docs/examples/ghostnet.py:build --work-dir runs/ghostnet --trials 1392 --trials-per-iter 16  # 87 tasks
"""

import torch
from torch import nn


class Ghost(nn.Module):
    """A ghost module: ``out // 2`` channels by a 1x1 convolution, the rest by a 3x3 depthwise one."""

    def __init__(self, cin: int, out: int, relu: bool = True):
        super().__init__()
        half = out // 2
        act = nn.ReLU() if relu else nn.Identity()
        self.primary = nn.Sequential(nn.Conv2d(cin, half, 1, bias=False), nn.BatchNorm2d(half), act)
        self.cheap = nn.Sequential(nn.Conv2d(half, out - half, 3, padding=1, groups=half, bias=False),
                                   nn.BatchNorm2d(out - half), act)

    def forward(self, x):
        y = self.primary(x)
        return torch.cat((y, self.cheap(y)), 1)


class Bottleneck(nn.Module):
    """Ghost, (strided depthwise), (squeeze-and-excitation), ghost, plus the shortcut."""

    def __init__(self, cin: int, mid: int, out: int, stride: int, se: bool):
        super().__init__()
        layers = [Ghost(cin, mid)]
        if stride > 1:
            layers += [nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid)]
        self.body = nn.Sequential(*layers)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, mid // 4, 1), nn.ReLU(),
                                nn.Conv2d(mid // 4, mid, 1), nn.Hardsigmoid()) if se else None
        self.out = Ghost(mid, out, relu=False)
        self.short = (nn.Identity() if stride == 1 and cin == out else
                      nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin),
                                    nn.Conv2d(cin, out, 1, bias=False), nn.BatchNorm2d(out)))

    def forward(self, x):
        y = self.body(x)
        if self.se is not None:
            y = y * self.se(y)
        return self.out(y) + self.short(x)


# (mid, out, stride, squeeze-and-excitation) of GhostNet 1.0x's first 11 bottlenecks
STAGES = [(16, 16, 1, False), (48, 24, 2, False), (72, 24, 1, False), (72, 40, 2, True), (120, 40, 1, True),
          (240, 80, 2, False), (200, 80, 1, False), (184, 80, 1, False), (480, 112, 1, True), (672, 112, 1, True),
          (672, 160, 2, True)]


class GhostNet(nn.Module):
    """Stem, the bottlenecks of :data:`STAGES`, a 1x1 convolution, pooling and the classifier."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        blocks, cin = [], 16
        for mid, out, stride, se in STAGES:
            blocks.append(Bottleneck(cin, mid, out, stride, se))
            cin = out
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Sequential(nn.Conv2d(cin, 960, 1, bias=False), nn.BatchNorm2d(960), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(960, 1000))

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)))


def build():
    """``(model, example inputs)``: the GhostNet in eval mode and one random 224x224 RGB image."""
    torch.manual_seed(1)
    return GhostNet().eval(), (torch.randn(1, 3, 224, 224),)
