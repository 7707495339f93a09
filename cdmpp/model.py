"""The latency model, for inference and training alike: the network, its checkpoints,
a label-free batch of programs, batched prediction and prediction intervals.

Torch only: nothing here imports Lightning, wandb or matplotlib, so that
:class:`cdmpp.LatencyPredictor`, the MetaSchedule plugin and the server load none of them.
Training (:mod:`cdmpp.train`) builds on this module.

The network is a transformer encoder over a program's leaf vectors.

CDMPP (EuroSys 2024), section 4.2-4.3: each leaf vector of the compact AST is
embedded, a sinusoidal positional encoding of the leaf's pre-order position is
added (Vaswani et al. 2017, section 3.5), a transformer encoder mixes the leaves,
the outputs are pooled over the leaves and an MLP head predicts the standardised
log-latency.  Input normalisation and label standardisation are buffers of the
module, so a checkpoint carries them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch
from torch import nn

from cdmpp.cache_fit import FIT_DIM, cache_fit_features
from cdmpp.device import DEFAULT_CACHES, DESCRIPTOR_DIM
from cdmpp.encoder import encode_packed, sinusoidal_encoding, tree_parents
from cdmpp.errors import InputError
from cdmpp.featurize import FEATURE_DIM
from cdmpp.roofline import RooflineBound
from cdmpp.tree_gnn import TreeMessagePassing

POOLINGS = ("sum", "mean", "max", "lse")


@dataclass
class ModelConfig:
    """Hyper-parameters of :class:`LatencyTransformer`; the defaults are the shipped
    checkpoint's recipe (every loop of the compact AST and the schedule trace as tokens
    among the leaves, and the log-sum-exp head; with
    :class:`cdmpp.train.config.TrainConfig`'s Huber loss and trace dropout).

    Attributes:
        feature_dim: leaf feature width ``F``.
        d_model: embedding width.
        n_heads: attention heads.
        n_layers: encoder layers.
        ff_dim: feed-forward width of each encoder layer.
        dropout: dropout rate.
        pooling: ``"sum"``, ``"mean"`` or ``"max"`` over the leaves, then the head; or
            ``"lse"``: the head reads every token and gives its latency term, and the
            program's log-latency is the log-sum-exp of the terms (natural log of
            seconds), as a program's time is the sum of its statements' times
            (:meth:`LatencyTransformer.output`).
        positional_encoding: add the sinusoidal pre-order positional encoding.
        num_devices: devices the model knows (rows of its device table, besides row
            0, the "unknown device" row).  0 makes a model without device input, which
            predicts for the one device it was trained on.
        device_dim: width of a device's vector: its learned embedding plus a linear
            map of its descriptor (:func:`cdmpp.device.descriptor_vector`),
            concatenated to the pooled program embedding before the head.
        descriptor_dim: width of the device descriptor.
        trace_tokens: each program's sequence starts with a token of its schedule
            trace's decisions (:func:`cdmpp.featurize.trace.with_trace_tokens`); its
            input rows then have ``FEATURE_DIM + TRACE_DIM + 1`` columns, and prediction
            needs each program's trace unless ``trace_optional``.
        trace_optional: the model was trained with trace dropout
            (:attr:`cdmpp.train.config.TrainConfig.trace_dropout`): a program without a
            trace (a bare PrimFunc) is predicted from its leaves alone, without the token.
        loop_tokens: every loop of the compact AST is a token among the leaves, in
            pre-order (:func:`cdmpp.featurize.loops.with_loop_tokens`); the input rows
            gain ``LOOP_DIM + 1`` columns before the trace token's.
        tree_attention: with ``loop_tokens``, the attention of every layer gets a learned
            bias per head for a token's parent and for its children in the compact AST
            (:func:`tree_parents`), so that the encoder sees the tree's edges, not only
            the pre-order; zero at the start, so training begins from the plain encoder.
        tree_gnn: with ``loop_tokens``, this many GATv2 layers of message passing along
            the compact AST's parent-child edges before the encoder
            (:class:`cdmpp.tree_gnn.TreeMessagePassing`, PyTorch Geometric); 0: none.
        roofline: the level from physics: the prediction is the program's roofline bound
            on the device (:class:`cdmpp.roofline.RooflineBound`: FLOPs and bytes over the
            descriptor's peak rates, each with a learned per-device correction, plus an
            overhead) times ``1 + e^z``, a learned non-negative inefficiency on top of it
            (NeuSight, ASPLOS 2025, bounds its tile predictions the same way).
        cache_fit: every leaf token also reads its working sets against the device's
            caches, its vector width against the ISA's and its parallel extent against
            the cores (:func:`cdmpp.cache_fit.cache_fit_features`, through a linear map
            that starts at zero); the encoder then depends on the device.
    """

    feature_dim: int = FEATURE_DIM
    d_model: int = 192
    n_heads: int = 4
    n_layers: int = 3
    ff_dim: int = 512
    dropout: float = 0.05
    pooling: str = "lse"
    positional_encoding: bool = True
    num_devices: int = 0
    device_dim: int = 32
    descriptor_dim: int = DESCRIPTOR_DIM
    trace_tokens: bool = True
    trace_optional: bool = False
    loop_tokens: bool = True
    tree_attention: bool = False
    tree_gnn: int = 0
    roofline: bool = False
    cache_fit: bool = False

    def __post_init__(self):
        if self.pooling not in POOLINGS:
            raise InputError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.d_model % self.n_heads:
            raise InputError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not 0 <= self.dropout < 1:
            raise InputError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.trace_optional and not self.trace_tokens:
            raise InputError("trace_optional needs trace_tokens: only a model that reads traces can do without one")
        if self.tree_attention and not self.loop_tokens:
            raise InputError("tree_attention needs loop_tokens: the tree's inner nodes are the loop tokens")
        if self.tree_gnn < 0 or (self.tree_gnn and not self.loop_tokens):
            raise InputError(f"tree_gnn needs loop_tokens and a layer count >= 0, got {self.tree_gnn}")

    @staticmethod
    def from_json(obj: dict) -> "ModelConfig":
        """Build from a dict, ignoring unknown keys; a dict without ``trace_tokens`` or
        ``loop_tokens`` (a checkpoint from before them) reads no traces or no loops, and
        one without ``pooling`` mean-pools."""
        names = {f.name for f in fields(ModelConfig)}
        obj = {"trace_tokens": False, "loop_tokens": False, "pooling": "mean", **obj}
        return ModelConfig(**{k: v for k, v in obj.items() if k in names})


class LatencyTransformer(nn.Module):
    """Predicts standardised log-latency from a padded batch of leaf sequences.

    ``forward(x, pos, mask, device)``: ``x`` float32 ``(B, L, F)``, ``pos`` int64
    ``(B, L)``, ``mask`` bool ``(B, L)`` (True on real leaves), ``device`` int64
    ``(B,)`` rows of the device table (``None``: row 0, the unknown device; ignored
    by a model without devices) -> float32 ``(B,)``.
    :meth:`predict_log_latency` undoes the standardisation (natural log of seconds).

    With ``config.num_devices > 0`` the model takes the device as input: row ``d`` of
    the device table is a learned embedding plus a linear map of the device's
    descriptor (``device_descriptor[d]``, a buffer), and the head reads the pooled
    program embedding concatenated with it.  Row 0 is the unknown device: an
    embedding trained by device dropout (:class:`~cdmpp.train.lightning.TrainConfig`)
    that, with a device's descriptor, stands for a device never measured.
    :meth:`add_device` appends a row.

    ``pack_tokens`` (default True) runs the encoder on the real tokens only
    (:func:`encode_packed`); False runs ``nn.TransformerEncoder`` on the padded batch,
    the same function with more work (the before of ``cdmpp bench epoch-time``).
    """

    pack_tokens: bool = True

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        c = config
        self.register_buffer("feature_mean", torch.zeros(c.feature_dim))
        self.register_buffer("feature_std", torch.ones(c.feature_dim))
        self.register_buffer("label_mean", torch.zeros(()))
        self.register_buffer("label_std", torch.ones(()))
        self.embed = nn.Sequential(nn.Linear(c.feature_dim, c.d_model), nn.GELU(), nn.Linear(c.d_model, c.d_model))
        layer = nn.TransformerEncoderLayer(
            c.d_model, c.n_heads, c.ff_dim, c.dropout, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, c.n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(c.d_model)
        if c.tree_attention:  # attention bias per head: towards the parent, towards the children
            self.tree_bias = nn.Parameter(torch.zeros(2, c.n_heads))
        if c.tree_gnn:
            self.tree_gnn = TreeMessagePassing(c.d_model, c.n_heads, c.tree_gnn, c.dropout)
        if c.roofline:
            self.roofline = RooflineBound(c.num_devices + 1 if c.num_devices > 0 else 1)
        if c.cache_fit:
            self.fit_proj = nn.Linear(FIT_DIM, c.d_model)
            nn.init.zeros_(self.fit_proj.weight)
            nn.init.zeros_(self.fit_proj.bias)
            default = torch.log2(torch.tensor(DEFAULT_CACHES, dtype=torch.float32))
            self.register_buffer("device_caches", default.repeat(c.num_devices + 1 if c.num_devices > 0 else 1, 1))
        head_in = c.d_model
        if c.num_devices > 0:
            self.device_embedding = nn.Embedding(c.num_devices + 1, c.device_dim)
            nn.init.normal_(self.device_embedding.weight, std=0.02)
            self.descriptor_proj = nn.Linear(c.descriptor_dim, c.device_dim)
            self.register_buffer("device_descriptor", torch.zeros(c.num_devices + 1, c.descriptor_dim))
            # per-device shift of the natural-log latency, fitted from a few shots (train/adapt.py)
            self.register_buffer("device_offset", torch.zeros(c.num_devices + 1))
            head_in += c.device_dim
        self.head = nn.Sequential(nn.Linear(head_in, c.d_model), nn.GELU(), nn.Linear(c.d_model, 1))

    def device_vector(self, device_row: torch.Tensor, embedding_row: torch.Tensor | None = None) -> torch.Tensor:
        """Device vectors, float32 ``(B, device_dim)``.

        Args:
            device_row: int64 ``(B,)`` rows whose descriptors are read.
            embedding_row: int64 ``(B,)`` rows whose learned embeddings are read
                (default ``device_row``); training passes 0 for dropped devices.
        """
        emb = self.device_embedding(device_row if embedding_row is None else embedding_row)
        return emb + self.descriptor_proj(self.device_descriptor[device_row])

    @torch.no_grad()
    def set_device_descriptors(self, descriptors) -> None:
        """Set the descriptor of every row: float32 ``(num_devices + 1, descriptor_dim)``
        (row 0, the unknown device, is usually zeros)."""
        d = torch.as_tensor(np.asarray(descriptors, dtype=np.float32))
        if d.shape != self.device_descriptor.shape:
            raise InputError(f"descriptors of shape {tuple(d.shape)}, the table is {tuple(self.device_descriptor.shape)}")
        self.device_descriptor.copy_(d)

    @torch.no_grad()
    def set_device_caches(self, caches) -> None:
        """Set each row's cache sizes for ``cache_fit``: ``(rows, 3)`` bytes of the L1 data
        cache, the L2 and the L3 (:func:`cdmpp.device.device_caches`; stored as log2)."""
        c = torch.log2(torch.as_tensor(np.asarray(caches, dtype=np.float64)).float())
        if c.shape != self.device_caches.shape:
            raise InputError(f"caches of shape {tuple(c.shape)}, the table is {tuple(self.device_caches.shape)}")
        self.device_caches.copy_(c)

    @torch.no_grad()
    def add_device(self, descriptor, init_row: int = 0, caches=None) -> int:
        """Append a device row; returns its index.

        Args:
            descriptor: float32 ``(descriptor_dim,)`` the new device's descriptor.
            init_row: the row whose learned embedding the new row starts from (0, the
                unknown device: the zero-shot guess from the descriptor alone).
            caches: the new device's ``(L1 data, L2, L3)`` bytes for ``cache_fit``
                (default: row ``init_row``'s).

        Raises:
            ValueError: the model has no device table.
        """
        if self.config.num_devices <= 0:
            raise InputError("this model has no device input (num_devices == 0): it cannot learn a new device")
        old = self.device_embedding.weight.data
        emb = nn.Embedding(old.shape[0] + 1, old.shape[1])
        emb.weight.data[:-1] = old
        emb.weight.data[-1] = old[init_row]
        self.device_embedding = emb
        desc = torch.as_tensor(np.asarray(descriptor, dtype=np.float32)).reshape(1, -1)
        self.device_descriptor = torch.cat([self.device_descriptor, desc], dim=0)
        self.device_offset = torch.cat([self.device_offset, self.device_offset[init_row].reshape(1)])
        if self.config.roofline:
            self.roofline.add_row(init_row)
        if self.config.cache_fit:
            new = (torch.log2(torch.as_tensor(np.asarray(caches, dtype=np.float64)).float()).reshape(1, 3)
                   if caches is not None else self.device_caches[init_row:init_row + 1])
            self.device_caches = torch.cat([self.device_caches, new])
        self.config.num_devices += 1
        return self.config.num_devices

    def set_normalization(self, x: torch.Tensor, log_latency: torch.Tensor) -> None:
        """Fit the input normalisation (``x`` ``(N, F)`` leaf rows) and label standardisation."""
        self.feature_mean.copy_(x.mean(0))
        self.feature_std.copy_(x.std(0).clamp_min(1e-3))
        self.label_mean.copy_(log_latency.mean())
        self.label_std.copy_(log_latency.std().clamp_min(1e-3))

    def encoded(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, device_row=None) -> torch.Tensor:
        """The encoder's output per token, float32 ``(B, L, d_model)`` (``device_row``, int64
        ``(B,)``: the devices a ``cache_fit`` model measures the tiles against; ``None``:
        row 0)."""
        h = self.embed((x - self.feature_mean) / self.feature_std)
        if self.config.cache_fit:
            rows = (torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
                    if device_row is None or self.config.num_devices <= 0 else device_row)
            desc = self.device_descriptor[rows] if self.config.num_devices > 0 else None
            h = h + self.fit_proj(cache_fit_features(x, self.device_caches[rows], desc)).to(h.dtype)
        if self.config.positional_encoding:
            h = h + sinusoidal_encoding(pos, self.config.d_model)
        if self.config.tree_gnn:
            h = self.tree_gnn(h, x, mask)
        if not self.config.tree_attention and self.pack_tokens:
            return self.norm(encode_packed(self.encoder.layers, h, mask))
        if not self.config.tree_attention:
            return self.norm(self.encoder(h, src_key_padding_mask=~mask))
        return self.norm(self.encoder(h, mask=self.tree_attention_bias(x, mask),
                                      src_key_padding_mask=torch.zeros_like(mask, dtype=h.dtype).masked_fill(~mask,
                                                                                                             float("-inf"))))

    def tree_attention_bias(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The attention bias of ``tree_attention``, float ``(B * n_heads, L, L)``: head
        ``k``'s ``tree_bias[0, k]`` where a token attends to its parent, ``tree_bias[1, k]``
        where a parent attends to its child, 0 elsewhere."""
        b, length = mask.shape
        parent = tree_parents(x, mask)
        up = torch.nn.functional.one_hot(parent.clamp_min(0), length).to(self.tree_bias.dtype)
        up = up * (parent >= 0).unsqueeze(-1).to(up.dtype)  # [b, i, j]: j is i's parent
        bias = (self.tree_bias[0].view(1, -1, 1, 1) * up.unsqueeze(1)
                + self.tree_bias[1].view(1, -1, 1, 1) * up.transpose(1, 2).unsqueeze(1))
        return bias.reshape(b * self.config.n_heads, length, length)

    def pool(self, h: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Tokens ``h`` ``(B, L, d_model)`` pooled over ``mask`` (bool ``(B, L)``) into the
        program embedding, float32 ``(B, d_model)`` (the mean for ``"lse"``, whose head
        reads the tokens: the embedding then serves program selection and CMD)."""
        m = mask.unsqueeze(-1).to(h.dtype)
        if self.config.pooling == "sum":
            return (h * m).sum(1)
        if self.config.pooling in ("mean", "lse"):
            return (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return h.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(1).values

    def pooled(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, device_row=None) -> torch.Tensor:
        """The pooled program embedding, float32 ``(B, d_model)``."""
        return self.pool(self.encoded(x, pos, mask, device_row), mask)

    def output(self, h: torch.Tensor, mask: torch.Tensor, device_row=None, embedding_row=None,
               x: torch.Tensor | None = None) -> torch.Tensor:
        """Standardised log-latency, float32 ``(B,)``, from the tokens ``h`` ``(B, L, d_model)``.

        With ``pooling="lse"`` the head gives each token ``i`` a term ``z_i`` (standardised
        log-latency); the program's natural-log latency is ``log sum_i exp(z_i * std +
        mean)`` over the tokens of ``mask``: the time of a program is the sum of its
        statements' times.  Otherwise the head reads the pooled embedding.  A
        ``roofline`` model also needs the raw token rows ``x`` ``(B, L, F)``.
        """
        device_vectors = None
        if self.config.num_devices > 0:
            if device_row is None:
                device_row = torch.zeros(h.shape[0], dtype=torch.int64, device=h.device)
            device_vectors = self.device_vector(device_row, embedding_row)
        return self.output_for_vectors(h, mask, device_vectors, self.roofline_bound(x, mask, device_row, embedding_row))

    def roofline_bound(self, x: torch.Tensor | None, mask: torch.Tensor, device_row=None,
                       embedding_row=None) -> torch.Tensor | None:
        """The natural log of each program's roofline bound in seconds, float32 ``(B,)``
        (:class:`cdmpp.roofline.RooflineBound`: the physics from ``device_row``'s
        descriptor, the learned correction of ``embedding_row``, default ``device_row``);
        ``None`` for a model without ``roofline``.

        Raises:
            InputError: a ``roofline`` model without the raw rows ``x``.
        """
        if not self.config.roofline:
            return None
        if x is None:
            raise InputError("a roofline model needs the raw token rows x to bound each program")
        if self.config.num_devices <= 0:
            return self.roofline(x, mask, None, None)
        if device_row is None:
            device_row = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        return self.roofline(x, mask, self.device_descriptor[device_row],
                             device_row if embedding_row is None else embedding_row)

    def output_for_vectors(self, h: torch.Tensor, mask: torch.Tensor, device_vectors: torch.Tensor | None,
                           bound: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`output` for given device vectors ``device_vectors``, float32 ``(B, device_dim)``
        (``None`` for a model without devices), and roofline bounds ``bound`` (natural log
        of seconds, ``(B,)``; ``None`` without ``roofline``): what ``cdmpp adapt``
        differentiates to fit one device's row."""
        if self.config.pooling != "lse":
            pooled = self.pool(h, mask)
            if device_vectors is not None:
                pooled = torch.cat([pooled, device_vectors.to(pooled.dtype)], dim=-1)
            out = self.head(pooled).squeeze(-1)
            if bound is None:
                return out
            total = out.float() * self.label_std + self.label_mean
        else:
            if device_vectors is not None:
                h = torch.cat([h, device_vectors.to(h.dtype).unsqueeze(1).expand(-1, h.shape[1], -1)], dim=-1)
            terms = self.head(h).squeeze(-1).float() * self.label_std + self.label_mean
            total = torch.logsumexp(terms.masked_fill(~mask, float("-inf")), dim=1)
        if bound is not None:  # the bound times 1 + e^z: never below it
            total = bound + torch.nn.functional.softplus(total - self.label_mean)
        return (total - self.label_mean) / self.label_std

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor, device_row=None) -> torch.Tensor:
        return self.output(self.encoded(x, pos, mask, device_row), mask, device_row, x=x)

    def predict_log_latency(self, x, pos, mask, device_row=None) -> torch.Tensor:
        """Natural log of the latency in seconds, float32 ``(B,)``, on devices ``device_row``
        (int64 ``(B,)`` rows of the device table; ``None``: the unknown device), with
        each device's ``device_offset`` added."""
        out = self(x, pos, mask, device_row) * self.label_std + self.label_mean
        if self.config.num_devices > 0 and device_row is not None:
            out = out + self.device_offset[device_row]
        return out


