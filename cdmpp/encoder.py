"""The encoder's building blocks: the pre-order positional encoding, the compact AST's
parent of each token, and pre-norm encoder layers run on the real tokens only.

Torch only, like :mod:`cdmpp.model`, which builds :class:`~cdmpp.model.LatencyTransformer`
from them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cdmpp.featurize import FEATURE_DIM
from cdmpp.featurize.loops import LOOP_DIM, LOOP_FEATURES


def sinusoidal_encoding(pos: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal encoding of integer positions.

    Args:
        pos: int64 ``(...,)`` positions.
        dim: encoding width (even).

    Returns:
        float32 ``(..., dim)``: ``sin(p / 10000^(2i/dim))`` and ``cos(...)`` interleaved.
    """
    half = dim // 2
    freq = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=pos.device) / half)
    ang = pos.to(torch.float32).unsqueeze(-1) * freq
    return torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2)


LOOP_DEPTH = LOOP_FEATURES.index("depth")


def tree_parents(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each token's parent in the compact AST, from the token rows themselves.

    The rows are a loop-token model's (:func:`cdmpp.featurize.loops.with_loop_tokens`):
    leaves and loops in pre-order, a loop flagged in column ``FEATURE_DIM + LOOP_DIM``,
    a leaf's depth (its enclosing loops) in column 0 and a loop's in its ``depth``
    column.  In pre-order, a token's parent is the last loop before it one level up;
    tokens at depth 0, trace tokens and padding have none.

    Args:
        x: float32 ``(B, L, F)`` raw (not normalised) token rows.
        mask: bool ``(B, L)``, True on real tokens.

    Returns:
        int64 ``(B, L)``: the parent's index in the sequence, -1 for none.
    """
    is_loop = (x[..., FEATURE_DIM + LOOP_DIM] > 0.5) & mask
    depth = torch.where(is_loop, x[..., FEATURE_DIM + LOOP_DEPTH], x[..., 0]).round()
    length = x.shape[1]
    idx = torch.arange(length, device=x.device)
    before = idx.view(1, 1, length) < idx.view(1, length, 1)  # [i, j]: j comes before i
    cand = before & is_loop.unsqueeze(1) & (depth.unsqueeze(1) == depth.unsqueeze(2) - 1)
    parent = torch.where(cand, idx.view(1, 1, length), torch.full_like(idx, -1).view(1, 1, length)).amax(dim=2)
    return torch.where(mask & (depth > 0), parent, torch.full_like(parent, -1))


def encode_packed(layers: nn.ModuleList, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Pre-norm encoder layers on the real tokens only; the same function as
    ``nn.TransformerEncoder(layers)(h, src_key_padding_mask=~mask)`` with the same
    parameters, without the work on padding.

    Only attention needs the padded ``(B, L)`` layout.  The projections, the
    feed-forward block, the layer norms and the dropouts run on the ``N = mask.sum()``
    real tokens, a little over half of a randomly batched ``B * L`` (the "unpadding" of
    packed-sequence BERT training).

    Args:
        layers: ``nn.TransformerEncoderLayer`` modules built with ``batch_first=True``
            and ``norm_first=True`` (their ``self_attn``, ``linear1``/``linear2``,
            ``norm1``/``norm2``, ``dropout``/``dropout1``/``dropout2``, ``activation``).
        h: float ``(B, L, d_model)`` token embeddings.
        mask: bool ``(B, L)``, True on real tokens; every row needs at least one.

    Returns:
        float ``(B, L, d_model)``: the encoded tokens, zero on padding.
    """
    b, length, d = h.shape
    flat = mask.reshape(-1).nonzero().squeeze(1)  # (N,)
    t = h.reshape(b * length, d).index_select(0, flat)  # (N, d)
    keys = mask[:, None, None, :]  # (B, 1, 1, L): which keys a query attends to
    for layer in layers:
        attn = layer.self_attn
        heads = attn.num_heads
        qkv = nn.functional.linear(layer.norm1(t), attn.in_proj_weight, attn.in_proj_bias)  # (N, 3d)
        qkv = qkv.new_zeros(b * length, 3 * d).index_copy(0, flat, qkv)
        q, k, v = qkv.view(b, length, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # (B, H, L, d / H) each
        o = nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=keys, dropout_p=attn.dropout if layer.training else 0.0)
        o = o.transpose(1, 2).reshape(b * length, d).index_select(0, flat)
        t = t + layer.dropout1(attn.out_proj(o))
        t = t + layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(layer.norm2(t))))))
    return t.new_zeros(b * length, d).index_copy(0, flat, t).view(b, length, d)
