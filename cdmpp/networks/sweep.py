"""The operator sweep: the kernels around a network's dense layers, at shapes drawn wide.

A third of a network's tasks are layout, normalisation, mask and elementwise kernels
whose MetaSchedule design space often holds one program (reshape, transpose, layer norm,
softmax, casts, masks, rotary embeddings).  The zoo's networks give few shapes of each,
so the sweep measures them on their own, nn-Meter style (Zhang et al., "nn-Meter",
MobiSys 2021, Section 4: kernel configurations sampled over the space networks use).

A sweep entry is a torch module that applies every operator of the sweep that fits one
input shape to that input, each on its own (so that Relax's fusion gives each operator,
or its short fused chain, a task of its own).  Its name carries the shape, so that any
entry can be rebuilt from its name:

- ``sweep-8x512x768``: the float32 operators on an input of shape ``(8, 512, 768)``
  (2-D to 5-D);
- ``sweep-take-4x128-32000x1024``: an embedding lookup (a gather, ``take``) of
  ``(4, 128)`` token ids in a ``32000 x 1024`` table.

:func:`sweep_names` draws entries at random (seeded): batch 1-64, sequence 1-4,096,
hidden 64-8,192, image sides 7-112, ranks 2 to 5, at most 2^22 elements per tensor.
:func:`refine_names` is the second pass, nn-Meter's adaptive sampling: new shapes near the
entries a model places worst.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np
import torch
from torch import nn

from cdmpp.errors import UnknownNetworkError

PREFIX = "sweep-"
FAMILY = "sweep"
MAX_ELEMENTS = 1 << 22
MIN_ELEMENTS = 64


class _RMSNorm(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class OperatorSweep(nn.Module):
    """Every sweep operator that fits an input of shape ``shape`` (float32, 2-D to 5-D),
    each applied to the input on its own; ``forward`` returns their outputs as a tuple.

    Operators: softmax, layer norm, RMSNorm, sum / max / mean over the last axis, GELU,
    SiLU-gated product, a cast to float16, a scaled and shifted tanh, the transpose of the
    last two axes, a reshape, a concat, a slice and a split of the last axis, an additive
    causal mask, rotary embeddings (even last axis), and for 4-D and 5-D inputs the
    attention permute and a group norm (axis 1 divisible by 4).
    """

    def __init__(self, shape: tuple[int, ...]):
        super().__init__()
        self.shape = tuple(shape)
        last = shape[-1]
        self.ln = nn.LayerNorm(last)
        self.rms = _RMSNorm(last)
        self.gn = nn.GroupNorm(4, shape[1]) if len(shape) >= 4 and shape[1] % 4 == 0 else None
        rows = shape[-2]
        self.register_buffer("causal", torch.triu(torch.full((rows, last), -1e9), 1), persistent=False)
        if last % 2 == 0:
            freq = 1.0 / (10000 ** (torch.arange(0, last, 2, dtype=torch.float32) / last))
            angles = torch.outer(torch.arange(rows, dtype=torch.float32), freq)
            self.register_buffer("cos", torch.cat((angles, angles), -1).cos(), persistent=False)
            self.register_buffer("sin", torch.cat((angles, angles), -1).sin(), persistent=False)
        else:
            self.cos = self.sin = None

    def forward(self, x):
        last = x.shape[-1]
        out = [
            torch.softmax(x, -1), self.ln(x), self.rms(x),
            x.sum(-1), x.max(-1).values, x.mean(-1),
            nn.functional.gelu(x), nn.functional.silu(x) * x, x.to(torch.float16), torch.tanh(x * 0.5) + 1.0,
            x.transpose(-1, -2).contiguous(), x.reshape(x.shape[0], -1) * 1.0, torch.cat((x, x), -1),
            x[..., : max(1, last // 2)] + 0.0, *torch.split(x, max(1, last // 2), -1), x + self.causal,
        ]
        if self.cos is not None:
            out.append(x * self.cos + _rotate_half(x) * self.sin)
        if x.dim() == 4:
            out.append(x.permute(0, 2, 1, 3).contiguous())
        if x.dim() == 5:
            out.append(x.permute(0, 2, 1, 3, 4).contiguous())
        if self.gn is not None:
            out.append(self.gn(x))
        return tuple(out)


class EmbeddingLookup(nn.Module):
    """An embedding lookup (a gather of rows, ``take``) of a ``vocab x hidden`` table."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.table = nn.Embedding(vocab, hidden)

    def forward(self, ids):
        return self.table(ids)


def _dims(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("x"))


def sweep_entry(name: str) -> tuple:
    """What a sweep entry named as the module says builds:
    ``(build, input shape, input dtype, source)``, the fields of its
    :class:`cdmpp.networks.NetworkSpec` after its name and :data:`FAMILY`.

    Raises:
        UnknownNetworkError: a malformed sweep name, or a shape out of the sweep's range.
    """
    parts = name[len(PREFIX):].split("-")
    try:
        if parts[0] == "take" and len(parts) == 3:
            ids, (vocab, hidden) = _dims(parts[1]), _dims(parts[2])
            if len(ids) != 2 or min(*ids, vocab, hidden) < 1:
                raise ValueError
            return (lambda: EmbeddingLookup(vocab, hidden), ids, "int64",
                    f"{EmbeddingLookup.__module__}.{EmbeddingLookup.__qualname__}")
        if len(parts) != 1:
            raise ValueError
        shape = _dims(parts[0])
    except ValueError:
        raise UnknownNetworkError(f"{name!r} is not a sweep entry: sweep-AxBxC (2 to 5 dims) or "
                                  f"sweep-take-BxS-VOCABxHIDDEN") from None
    if not 2 <= len(shape) <= 5 or min(shape) < 1 or math.prod(shape) > MAX_ELEMENTS:
        raise UnknownNetworkError(f"{name!r}: a sweep shape has 2 to 5 positive dims and at most {MAX_ELEMENTS} "
                                  f"elements")
    return (lambda: OperatorSweep(shape), shape, "float32", f"{OperatorSweep.__module__}.{OperatorSweep.__qualname__}")


def _log_int(rng, low: int, high: int, multiple: int = 1) -> int:
    value = int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
    return max(low, value // multiple * multiple) if multiple > 1 else value


def _draw_shape(rng) -> tuple[int, ...]:
    batch = int(rng.choice([1, 1, 2, 4, 8, 16, 32, 64]))
    kind = rng.choice(["tokens", "tokens", "attention", "heads", "image", "flat", "video"])
    if kind == "flat":
        return (_log_int(rng, 1, 4096), _log_int(rng, 64, 8192, 16))
    if kind == "tokens":
        return (batch, _log_int(rng, 1, 4096), _log_int(rng, 64, 8192, 16))
    if kind == "attention":
        seq = _log_int(rng, 1, 2048)
        return (batch, int(rng.choice([1, 2, 4, 8, 12, 16, 32])), seq, seq)
    if kind == "heads":
        return (batch, int(rng.choice([1, 2, 4, 8, 12, 16, 32])), _log_int(rng, 1, 4096),
                int(rng.choice([32, 64, 80, 96, 128])))
    if kind == "image":
        side = _log_int(rng, 7, 112)
        return (batch, _log_int(rng, 16, 2048, 8), side, side)
    side = _log_int(rng, 7, 56)
    return (batch, _log_int(rng, 16, 512, 8), _log_int(rng, 2, 16), side, side)


def sweep_names(count: int, seed: int = 0) -> list[str]:
    """``count`` distinct sweep entries drawn at random (about one in eight an embedding
    lookup), reproducibly from ``seed``; shapes of more than 2^22 or fewer than 64
    elements are drawn again.

    Raises:
        ValueError: ``count`` below 1.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    rng = np.random.default_rng(seed)
    names: dict[str, None] = {}
    while len(names) < count:
        if rng.random() < 0.125:
            ids = (int(rng.choice([1, 1, 2, 4, 8, 16, 32, 64])), _log_int(rng, 1, 4096))
            table = (_log_int(rng, 1000, 256000), _log_int(rng, 64, 8192, 16))
            if math.prod(ids) * table[1] > MAX_ELEMENTS or table[0] * table[1] > 4 * MAX_ELEMENTS:
                continue
            names[f"{PREFIX}take-{ids[0]}x{ids[1]}-{table[0]}x{table[1]}"] = None
            continue
        shape = _draw_shape(rng)
        if MIN_ELEMENTS <= math.prod(shape) <= MAX_ELEMENTS // 2:  # a concat doubles it
            names[PREFIX + "x".join(map(str, shape))] = None
    return list(names)


def _near(rng, dim: int, low: int = 1) -> int:
    """``dim`` scaled by a factor drawn log-uniformly in [1/2, 2], keeping its multiple of
    16 or of 2 (a hidden size, an even rotary axis)."""
    step = 16 if dim % 16 == 0 else 2 if dim % 2 == 0 else 1
    value = int(round(dim * math.exp(rng.uniform(-math.log(2), math.log(2)))))
    return max(max(low, step), value // step * step)


def _neighbour(rng, name: str) -> str | None:
    """A sweep entry near ``name`` (each dimension scaled by 1/2 to 2), or ``None`` when
    the drawn shape is out of the sweep's range."""
    parts = name[len(PREFIX):].split("-")
    if parts[0] == "take":
        (batch, seq), (vocab, hidden) = _dims(parts[1]), _dims(parts[2])
        ids, table = (_near(rng, batch), _near(rng, seq)), (_near(rng, vocab, 2), _near(rng, hidden))
        if math.prod(ids) * table[1] > MAX_ELEMENTS or table[0] * table[1] > 4 * MAX_ELEMENTS:
            return None
        return f"{PREFIX}take-{ids[0]}x{ids[1]}-{table[0]}x{table[1]}"
    shape = tuple(_near(rng, d) for d in _dims(parts[0]))
    if not MIN_ELEMENTS <= math.prod(shape) <= MAX_ELEMENTS // 2:
        return None
    return PREFIX + "x".join(map(str, shape))


def refine_names(errors: Mapping[str, float], count: int, seed: int = 0, known: Collection[str] = (),
                 threshold: float = math.log(1.25), per_entry: int = 4) -> list[str]:
    """The sweep's second pass: ``count`` new entries near the entries a model places
    worst, as nn-Meter's adaptive sampler refines where its predictor is weakest (Zhang
    et al., MobiSys 2021, Section 4.2).

    The entries whose error is above ``threshold`` are taken worst first, ``ceil(count /
    per_entry)`` of them (fewer if fewer are that far off), and each gets new shapes in
    turn: every dimension scaled by a factor drawn log-uniformly in [1/2, 2] (a multiple
    of 16 or an even size stays one), within the sweep's element bounds, none of them in
    ``known`` or drawn before.

    Args:
        errors: sweep entry name -> how far off the model places it, e.g. the mean
            ``|log(predicted / measured)|`` of its untunable tasks
            (:func:`cdmpp.train.evaluate.sweep_entry_errors`).
        count: new entries wanted.
        seed: seed of the draws.
        known: entries already collected (never returned).
        threshold: an entry counts as misplaced above this error (default: 1.25x).
        per_entry: new entries per misplaced entry.

    Returns:
        up to ``count`` new sweep entry names, in draw order (fewer when no entry is
        above ``threshold`` or the neighbourhoods run dry).

    Raises:
        ValueError: ``count`` or ``per_entry`` below 1, or a name in ``errors`` that is not
            a sweep entry.
    """
    if count < 1 or per_entry < 1:
        raise ValueError(f"count and per_entry must be at least 1, got {count} and {per_entry}")
    for name in errors:
        if not name.startswith(PREFIX):
            raise ValueError(f"{name!r} is not a sweep entry")
        sweep_entry(name)  # a malformed one raises here
    worst = sorted((n for n, e in errors.items() if e > threshold), key=lambda n: (-errors[n], n))
    worst = worst[: math.ceil(count / per_entry)]
    rng = np.random.default_rng(seed)
    taken, out = set(known) | set(errors), []
    tries = dict.fromkeys(worst, 0)
    while len(out) < count and tries:
        for name in list(tries):
            if len(out) >= count:
                break
            tries[name] += 1
            if tries[name] > 16 * per_entry:  # a neighbourhood too small or too full to give more
                del tries[name]
                continue
            new = _neighbour(rng, name)
            if new is not None and new not in taken:
                taken.add(new)
                out.append(new)
    return out
