"""Message passing along the compact AST's parent-child edges, before the encoder.

The encoder sees the leaves and loops in pre-order (and, with ``tree_attention``, a
learned bias towards a token's parent and children).  This module passes messages
along the tree's edges themselves with PyTorch Geometric's ``GATv2Conv`` (Brody et
al., ICLR 2022): each loop and leaf token is a node, each parent-child pair of the
compact AST (:func:`cdmpp.encoder.tree_parents`) an edge in both directions, and each
layer adds its messages to the tokens (a residual, pre-norm), so that a leaf reads
its enclosing loops and a loop reads what it encloses before the attention layers
(:attr:`cdmpp.model.ModelConfig.tree_gnn`).

PyTorch Geometric is imported when such a model is built, never otherwise.
"""

from __future__ import annotations

import torch
from torch import nn

from cdmpp.encoder import tree_parents


def tree_edges(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The compact AST's edges over the real tokens of a batch, both directions.

    Args:
        x: float32 ``(B, L, F)`` raw token rows of a loop-token model.
        mask: bool ``(B, L)``, True on real tokens.

    Returns:
        int64 ``(2, 2E)``: PyG's ``edge_index`` over the ``mask.sum()`` real tokens, numbered
        in row-major order (``h[mask]``'s order): child -> parent, then parent -> child.
    """
    parent = tree_parents(x, mask)
    node = (torch.cumsum(mask.flatten().to(torch.int64), 0) - 1).view(mask.shape)
    b, i = torch.nonzero(mask & (parent >= 0), as_tuple=True)
    child, up = node[b, i], node[b, parent[b, i]]
    return torch.stack([torch.cat([child, up]), torch.cat([up, child])])


class TreeMessagePassing(nn.Module):
    """``layers`` GATv2 layers along the compact AST's edges (module docstring).

    ``forward(h, x, mask)``: ``h`` float32 ``(B, L, d_model)`` token embeddings, ``x``
    float32 ``(B, L, F)`` the raw token rows (for the edges), ``mask`` bool ``(B, L)``
    -> float32 ``(B, L, d_model)``, padding untouched.
    """

    def __init__(self, d_model: int, n_heads: int, layers: int, dropout: float):
        super().__init__()
        from torch_geometric.nn import GATv2Conv  # noqa: PLC0415  (PyG only for a model with tree_gnn layers)

        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(layers))
        self.convs = nn.ModuleList(
            GATv2Conv(d_model, d_model // n_heads, heads=n_heads, dropout=dropout, add_self_loops=True)
            for _ in range(layers)
        )

    def forward(self, h: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        edges = tree_edges(x, mask)
        z = h[mask]
        for norm, conv in zip(self.norms, self.convs):
            z = z + conv(norm(z), edges)
        return h.masked_scatter(mask.unsqueeze(-1), z)
