"""The level from physics: a program's roofline bound on a device, from its leaf features.

NeuSight (ASPLOS 2025) bounds each predicted tile time below by the device's roofline,
``max(FLOPs / peak FLOP/s, bytes / peak bandwidth)``, and learns only how far above
the bound a tile runs.  Here the same holds for a whole scheduled program: its
floating-point work is the sum over its leaves (buffer stores) of iterations times
the arithmetic of the stored value, its memory traffic the sum over the leaves of the
unique bytes each touched buffer spans (the compulsory traffic), and the bound adds a
fixed per-call overhead (a parallel launch)::

    bound = overhead + FLOPs / peak + bytes / bandwidth     (a sum: smooth, >= max)

The peak rates come from the device descriptor (cores, vector ISA, CPU or GPU), each
with a learned per-device correction in log space, so that a device's clock and
memory system are learned from its timings.  The model then predicts ``log bound +
softplus(z)``: a non-negative inefficiency ``z`` on top of the bound
(:attr:`cdmpp.model.ModelConfig.roofline`).

Torch only.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from cdmpp.device import DESCRIPTOR_FEATURES
from cdmpp.featurize.access import ACCESS_BUFFERS, ACCESS_FEATURE_NAMES
from cdmpp.featurize.ast import OWN_FEATURES

ITERATIONS = OWN_FEATURES.index("iterations")
ARITHMETIC = tuple(OWN_FEATURES.index(n) for n in ("add_sub", "mul", "div_mod", "max_min"))
UNIQUE_BYTES = tuple(len(OWN_FEATURES) + b * len(ACCESS_FEATURE_NAMES) + ACCESS_FEATURE_NAMES.index("unique_bytes")
                     for b in range(ACCESS_BUFFERS))
"""Leaf feature columns the bound reads (each ``log2(1 + x)``)."""

CPU_CLOCK_HZ = 2.5e9
"""The clock the base peak assumes; the learned correction absorbs a device's own."""
CPU_BANDWIDTH = 2.0e10
"""Bytes per second the base bound assumes for a CPU (one socket's DRAM, roughly)."""
GPU_PEAK = 5.0e13
GPU_BANDWIDTH = 2.0e12
CPU_OVERHEAD_S = 3.0e-6
GPU_OVERHEAD_S = 5.0e-6


def _col(name: str) -> int:
    return DESCRIPTOR_FEATURES.index(name)


def program_work(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(flops, bytes)`` of each program, float32 ``(B,)`` each, from its raw token rows.

    Args:
        x: float32 ``(B, L, F)`` raw (not normalised) token rows; a leaf's own features
            are its first columns (:data:`cdmpp.featurize.FEATURE_NAMES`), and loop or
            trace tokens hold zeros there, so they add nothing.
        mask: bool ``(B, L)``, True on real tokens.
    """
    x = x.float()
    m = mask.to(x.dtype)
    iters = torch.exp2(x[..., ITERATIONS]) - 1.0
    ops = sum(torch.exp2(x[..., c]) - 1.0 for c in ARITHMETIC)
    touched = sum(torch.exp2(x[..., c]) - 1.0 for c in UNIQUE_BYTES)
    return (iters * ops * m).sum(1), (touched * m).sum(1)


def base_log_rates(descriptor: torch.Tensor | None, batch: int) -> torch.Tensor:
    """Natural logs of ``(peak FLOP/s, bytes/s, overhead seconds)`` before the learned
    correction, float32 ``(B, 3)``.

    Args:
        descriptor: float32 ``(B, DESCRIPTOR_DIM)`` (:func:`cdmpp.device.descriptor_vector`),
            or ``None`` (a model without device input: a CPU of 2 cores with AVX-512).
        batch: ``B``, when ``descriptor`` is ``None``.
    """
    if descriptor is None:
        cpu = torch.tensor([math.log(2 * 16 * 4 * CPU_CLOCK_HZ), math.log(CPU_BANDWIDTH), math.log(CPU_OVERHEAD_S)])
        return cpu.expand(batch, 3)
    d = descriptor.float()
    lanes = 16.0 * d[:, _col("isa_avx512")] + 8.0 * d[:, _col("isa_avx2")] + 4.0 * d[:, _col("isa_other")]
    cores = torch.exp2(d[:, _col("log2_cores")])
    # two FMA units, two FLOPs each, per lane and cycle
    cpu_peak = torch.log(cores * lanes.clamp_min(4.0) * 4.0 * CPU_CLOCK_HZ)
    gpu = d[:, _col("kind_gpu")]
    peak = gpu * math.log(GPU_PEAK) + (1 - gpu) * cpu_peak
    bandwidth = gpu * math.log(GPU_BANDWIDTH) + (1 - gpu) * math.log(CPU_BANDWIDTH)
    overhead = gpu * math.log(GPU_OVERHEAD_S) + (1 - gpu) * math.log(CPU_OVERHEAD_S)
    return torch.stack([peak, bandwidth, overhead], dim=1)


class RooflineBound(nn.Module):
    """The natural log of each program's roofline bound in seconds (module docstring).

    ``forward(x, mask, descriptor, row)``: ``x`` float32 ``(B, L, F)`` raw token rows,
    ``mask`` bool ``(B, L)``, ``descriptor`` float32 ``(B, DESCRIPTOR_DIM)`` or ``None``,
    ``row`` int64 ``(B,)`` rows of the learned corrections -> float32 ``(B,)``.

    Args:
        rows: rows of learned corrections (one per device-table row; 1 for a model
            without device input).
    """

    def __init__(self, rows: int):
        super().__init__()
        # per row: log corrections of the peak FLOP/s, the bandwidth and the overhead
        self.correction = nn.Parameter(torch.zeros(rows, 3))

    @torch.no_grad()
    def add_row(self, init_row: int = 0) -> None:
        """Append a row of corrections, starting from row ``init_row``'s."""
        self.correction = nn.Parameter(torch.cat([self.correction.data, self.correction.data[init_row:init_row + 1]]))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, descriptor: torch.Tensor | None,
                row: torch.Tensor | None) -> torch.Tensor:
        flops, nbytes = program_work(x, mask)
        if row is None:
            row = torch.zeros(x.shape[0], dtype=torch.int64, device=x.device)
        rates = base_log_rates(descriptor, x.shape[0]).to(x.device) + self.correction[row]
        terms = torch.stack([torch.log(flops) - rates[:, 0], torch.log(nbytes) - rates[:, 1], rates[:, 2]], dim=1)
        return torch.logsumexp(terms, dim=1)
