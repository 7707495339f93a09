"""The latency model: a transformer encoder over a program's leaf vectors.

CDMPP (EuroSys 2024), section 4.2-4.3: each leaf vector of the compact AST is
embedded, a sinusoidal positional encoding of the leaf's pre-order position is
added (Vaswani et al. 2017, section 3.5), a transformer encoder mixes the leaves,
the outputs are pooled over the leaves and an MLP head predicts the standardised
log-latency.  Input normalisation and label standardisation are buffers of the
module, so a checkpoint carries them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
from torch import nn

from cdmpp.featurize import FEATURE_DIM

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


class CheckpointError(ValueError):
    """A checkpoint folder is missing a file, or a file is corrupt or does not match."""


@dataclass
class ModelConfig:
    """Hyper-parameters of :class:`LatencyTransformer`.

    Attributes:
        feature_dim: leaf feature width ``F``.
        d_model: embedding width.
        n_heads: attention heads.
        n_layers: encoder layers.
        ff_dim: feed-forward width of each encoder layer.
        dropout: dropout rate.
        pooling: ``"sum"``, ``"mean"`` or ``"max"`` over the leaves.
        positional_encoding: add the sinusoidal pre-order positional encoding.
    """

    feature_dim: int = FEATURE_DIM
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    ff_dim: int = 256
    dropout: float = 0.1
    pooling: str = "mean"
    positional_encoding: bool = True

    def __post_init__(self):
        if self.pooling not in ("sum", "mean", "max"):
            raise ValueError(f"pooling must be 'sum', 'mean' or 'max', got {self.pooling!r}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @staticmethod
    def from_json(obj: dict) -> "ModelConfig":
        """Build from a dict, ignoring unknown keys."""
        names = {f.name for f in fields(ModelConfig)}
        return ModelConfig(**{k: v for k, v in obj.items() if k in names})


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


class LatencyTransformer(nn.Module):
    """Predicts standardised log-latency from a padded batch of leaf sequences.

    ``forward(x, pos, mask)``: ``x`` float32 ``(B, L, F)``, ``pos`` int64 ``(B, L)``,
    ``mask`` bool ``(B, L)`` (True on real leaves) -> float32 ``(B,)``.
    :meth:`predict_log_latency` undoes the standardisation (natural log of seconds).
    """

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
        self.head = nn.Sequential(nn.Linear(c.d_model, c.d_model), nn.GELU(), nn.Linear(c.d_model, 1))

    def set_normalization(self, x: torch.Tensor, log_latency: torch.Tensor) -> None:
        """Fit the input normalisation (``x`` ``(N, F)`` leaf rows) and label standardisation."""
        self.feature_mean.copy_(x.mean(0))
        self.feature_std.copy_(x.std(0).clamp_min(1e-3))
        self.label_mean.copy_(log_latency.mean())
        self.label_std.copy_(log_latency.std().clamp_min(1e-3))

    def pooled(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The pooled program embedding, float32 ``(B, d_model)``."""
        h = self.embed((x - self.feature_mean) / self.feature_std)
        if self.config.positional_encoding:
            h = h + sinusoidal_encoding(pos, self.config.d_model)
        h = self.norm(self.encoder(h, src_key_padding_mask=~mask))
        m = mask.unsqueeze(-1).to(h.dtype)
        if self.config.pooling == "sum":
            return (h * m).sum(1)
        if self.config.pooling == "mean":
            return (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return h.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(1).values

    def forward(self, x: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.head(self.pooled(x, pos, mask)).squeeze(-1)

    def predict_log_latency(self, x, pos, mask) -> torch.Tensor:
        """Natural log of the latency in seconds, float32 ``(B,)``."""
        return self(x, pos, mask) * self.label_std + self.label_mean


def save_checkpoint(model: LatencyTransformer, folder: Path, metadata: dict | None = None) -> Path:
    """Write ``model.safetensors`` and ``config.json`` (model config + metadata) to ``folder``."""
    from safetensors.torch import save_file  # pylint: disable=import-outside-toplevel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(folder / WEIGHTS_FILE))
    (folder / CONFIG_FILE).write_text(
        json.dumps({"model": asdict(model.config), "metadata": metadata or {}}, indent=1), encoding="utf-8"
    )
    return folder


def load_checkpoint(folder: Path) -> tuple[LatencyTransformer, dict]:
    """Read a checkpoint written by :func:`save_checkpoint`.

    Returns:
        ``(model in eval mode, metadata dict)``.

    Raises:
        CheckpointError: a missing file, corrupt JSON or weights, or weights that do
            not fit the config.
    """
    from safetensors import SafetensorError  # pylint: disable=import-outside-toplevel
    from safetensors.torch import load_file  # pylint: disable=import-outside-toplevel

    folder = Path(folder)
    for name in (WEIGHTS_FILE, CONFIG_FILE):
        if not (folder / name).exists():
            raise CheckpointError(f"checkpoint {folder} has no {name}")
    try:
        cfg = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        config = ModelConfig.from_json(cfg["model"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"corrupt checkpoint config {folder / CONFIG_FILE}: {err}") from err
    try:
        state = load_file(str(folder / WEIGHTS_FILE))
    except (SafetensorError, OSError, RuntimeError, ValueError) as err:
        raise CheckpointError(f"corrupt checkpoint weights {folder / WEIGHTS_FILE}: {err}") from err
    model = LatencyTransformer(config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"weights in {folder / WEIGHTS_FILE} do not fit its config: {err}") from err
    return model.eval(), cfg.get("metadata", {})


@torch.no_grad()
def predict_latency_array(model: LatencyTransformer, data, index=None, batch_size: int = 512) -> np.ndarray:
    """Predicted latency in seconds, float64 ``(len(index),)``, of the programs ``index`` (int
    ``(K,)``, default all) of ``data`` (:class:`cdmpp.featurize.batch.FeaturizedPrograms`).

    Torch only (no Lightning, no PyG), so that prediction imports neither.
    """
    from cdmpp.featurize.batch import dense_programs  # pylint: disable=import-outside-toplevel

    index = np.arange(len(data)) if index is None else np.asarray(index, dtype=np.int64)
    model.eval()
    out = [
        model.predict_log_latency(*dense_programs(data, index[s : s + batch_size]))
        for s in range(0, len(index), batch_size)
    ]
    if not out:
        return np.zeros(0, dtype=np.float64)
    return np.exp(torch.cat(out).double().numpy())
