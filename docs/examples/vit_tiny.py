"""A network outside the zoo, given to cdmpp as ``docs/examples/vit_tiny.py:build``.

A ViT in the shape of DeiT-Tiny (Touvron et al. 2021: width 192, 3 heads, MLP 768, 16x16
patches of a 224x224 image, 197 tokens) cut to 4 pre-norm encoder blocks, at batch 1,
with random weights (latency does not depend on them).  No zoo network has its shapes,
so none of its tuning tasks is in any dataset.  Plain PyTorch, as a user's own model.

The class token is sliced (``x[:, :1]``), not indexed: ``x[:, 0]`` becomes a gather
(``take``) whose index MetaSchedule's measurement fills with random values, so every
trial of that task fails and the task keeps no measured record::

    cdmpp estimate docs/examples/vit_tiny.py:build
    cdmpp tune docs/examples/vit_tiny.py:build --work-dir runs/vit_tiny --trials 368 --trials-per-iter 16  # 23 tasks
"""

import torch
from torch import nn


class Block(nn.Module):
    """Pre-norm encoder block: multi-head self-attention, then a GELU MLP, each residual."""

    def __init__(self, dim: int, heads: int, mlp: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, mlp), nn.Linear(mlp, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5, dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, n, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.norm2(x))))


class TinyViT(nn.Module):
    """Patch embedding, class token, 4 blocks, the class token's LayerNorm and classifier."""

    def __init__(self, dim: int = 192, depth: int = 4, heads: int = 3, mlp: int = 768, patch: int = 16,
                 image: int = 224, classes: int = 1000):
        super().__init__()
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads, mlp) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, :1].flatten(1))  # the class token, sliced (see above)


def build() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``(model in eval mode, (one 1x3x224x224 float32 image,))``."""
    torch.manual_seed(0)
    return TinyViT().eval(), (torch.randn(1, 3, 224, 224),)
