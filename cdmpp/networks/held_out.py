"""The held-out test networks: networks outside the zoo, the strict test of networks never seen.

The zoo (:mod:`cdmpp.networks`) reserves the ConvNeXt and GPT-2 families and LLaMA-style
decoders: no workload of these networks is trained on (:mod:`cdmpp.held_out`).  This
module defines one network of each, in code and with random weights as the zoo does,
for the collector's held-out rule and for benchmarks that tune or time them (``cdmpp
bench tune --network convnext_tiny-b1``, ``cdmpp bench speed --network convnext_tiny-b1``).

* ``convnext_tiny-b1``: ConvNeXt-T (Liu et al., "A ConvNet for the 2020s", CVPR 2022,
  Table 9: depths 3-3-9-3, widths 96-768), one 224x224 image.
* ``gpt2_small-b1s128``: GPT-2 small (Radford et al. 2019: 12 layers, width 768, 12 heads;
  the ``transformers`` implementation), one sequence of 128 tokens.
* ``llama_1024-b1s128``: a LLaMA-style decoder (Touvron et al., "LLaMA", 2023, Section 2.2:
  pre-norm RMSNorm, SwiGLU feed-forward, causal attention; rotary embeddings left out)
  at half TinyLlama's width: 8 layers, width 1024, feed-forward 2816, 8 heads of width
  128 (LLaMA's head width), one sequence of 128 tokens.  Its dense layers (128x1024 ->
  2816 and 128x2816 -> 1024, 738 MFLOP each; 128x1024 -> 1024 without bias) and its
  attention batch-matmuls (heads of 128) occur in no zoo network.
"""

from __future__ import annotations

import torch
from torch import nn

from cdmpp.errors import UnknownNetworkError

from . import NetworkSpec, get_network


class _ConvNeXtBlock(nn.Module):
    """Depthwise 7x7 convolution, LayerNorm, 4x MLP with GELU, layer scale, residual."""

    def __init__(self, dim: int):
        super().__init__()
        self.dw = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.ln = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x):
        y = self.dw(x).permute(0, 2, 3, 1)  # NCHW -> NHWC
        y = self.fc2(nn.functional.gelu(self.fc1(self.ln(y)))) * self.gamma
        return x + y.permute(0, 3, 1, 2)


class _ChannelNorm(nn.Module):
    """LayerNorm over the channels of an NCHW tensor."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    def forward(self, x):
        return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ConvNeXt(nn.Module):
    """ConvNeXt (Liu et al. 2022); the defaults are ConvNeXt-T."""

    def __init__(self, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768), num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, dims[0], 4, 4), _ChannelNorm(dims[0])]
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            if i:
                layers += [_ChannelNorm(dims[i - 1]), nn.Conv2d(dims[i - 1], dim, 2, 2)]
            layers += [_ConvNeXtBlock(dim) for _ in range(depth)]
        self.features = nn.Sequential(*layers)
        self.ln = nn.LayerNorm(dims[-1])
        self.head = nn.Linear(dims[-1], num_classes)

    def forward(self, x):
        return self.head(self.ln(self.features(x).mean(dim=(2, 3))))


def _gpt2_small() -> nn.Module:
    from transformers import GPT2Config, GPT2Model  # noqa: PLC0415  (keeps transformers off this module's import)

    cfg = GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, attn_implementation="eager")

    class _GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.gpt2 = GPT2Model(cfg)

        def forward(self, ids):
            return self.gpt2(input_ids=ids, use_cache=False).last_hidden_state

    return _GPT2()


class _RMSNorm(nn.Module):
    """Root-mean-square LayerNorm (Zhang & Sennrich 2019), as LLaMA uses it."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class _LlamaBlock(nn.Module):
    """Pre-norm decoder block: causal multi-head attention and a SwiGLU feed-forward."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.ffn_norm = _RMSNorm(dim), _RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, mask):
        b, s, d = x.shape
        h = self.attn_norm(x)
        q, k, v = (f(h).reshape(b, s, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = torch.softmax(q @ k.transpose(-1, -2) * (d // self.heads) ** -0.5 + mask, dim=-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, d))
        h = self.ffn_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class LlamaStyle(nn.Module):
    """A LLaMA-style decoder (Touvron et al. 2023) without rotary embeddings."""

    def __init__(self, vocab: int = 32000, dim: int = 1024, layers: int = 8, heads: int = 8, hidden: int = 2816,
                 max_len: int = 1024):
        super().__init__()
        self.register_buffer("mask", torch.triu(torch.full((max_len, max_len), float("-inf")), diagonal=1))
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(_LlamaBlock(dim, heads, hidden) for _ in range(layers))
        self.norm = _RMSNorm(dim)

    def forward(self, ids):
        s = ids.shape[1]
        mask = self.mask[:s, :s]
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)


def held_out_networks() -> dict[str, NetworkSpec]:
    """The networks outside the zoo, by name (``"convnext_tiny-b1"``, ``"gpt2_small-b1s128"``,
    ``"llama_1024-b1s128"``)."""
    return {
        "convnext_tiny-b1": NetworkSpec("convnext_tiny-b1", "convnext", ConvNeXt, (1, 3, 224, 224)),
        "gpt2_small-b1s128": NetworkSpec("gpt2_small-b1s128", "gpt2", _gpt2_small, (1, 128), "int64"),
        "llama_1024-b1s128": NetworkSpec("llama_1024-b1s128", "llama", LlamaStyle, (1, 128), "int64"),
    }


def held_out_network(name: str) -> NetworkSpec:
    """One network outside the zoo.

    Raises:
        UnknownNetworkError: ``name`` is not one of :func:`held_out_networks` (the message
            lists them).
    """
    nets = held_out_networks()
    if name not in nets:
        raise UnknownNetworkError(f"{name!r} is not a network outside the zoo; those are: {', '.join(nets)}")
    return nets[name]


def network_spec(name: str) -> NetworkSpec:
    """A network outside the zoo (:func:`held_out_networks`) or a zoo network
    (:func:`cdmpp.networks.get_network`), by name.

    Raises:
        UnknownNetworkError: neither.
    """
    nets = held_out_networks()
    return nets[name] if name in nets else get_network(name)
