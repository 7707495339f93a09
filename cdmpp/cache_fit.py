"""What makes a tile fast, against the device: each leaf's working sets against the caches,
its vector width against the ISA's, its parallel extent against the cores.

The leaf features describe a buffer store in absolute terms (bytes, extents), the same on
every device.  Whether a tile is fast depends on how they compare with the device: a
reuse whose distance in bytes fits in L1 is cheap, one that spills to DRAM is not; a
vectorized extent that fills the ISA's registers wastes no lanes; a parallel extent
that divides among the cores keeps them all busy.  These are the features by which
Ansor's cost model and TenSet's reason about tiles (reuse distance, vectorization,
parallelism; Zheng et al., OSDI 2020, section 5.2), made relative to the device here
(:attr:`cdmpp.model.ModelConfig.cache_fit`):

- for each of the 5 buffers a leaf describes, its reuse distance in bytes over the L1
  data cache, the L2 and the L3 (log2 ratios; 0 for a buffer without reuse): 15;
- the bytes the leaf's loop nest touches (the sum of its buffers' unique bytes) over
  the three caches: 3;
- the vectorized extent in bits (extent times the stored type's bits) over the ISA's
  vector width: 1;
- the parallel extent over the cores: 1.

Each is a log2 ratio divided by 8 and clipped to [-2, 2]; loop and trace tokens get
zeros.  Torch only.
"""

from __future__ import annotations

import torch

from cdmpp.device import DESCRIPTOR_FEATURES
from cdmpp.featurize.access import ACCESS_BUFFERS, ACCESS_FEATURE_NAMES
from cdmpp.featurize.ast import OWN_FEATURES

FIT_DIM = 3 * ACCESS_BUFFERS + 3 + 2
"""Width of the cache-fit features of one token."""

_OWN = {n: i for i, n in enumerate(OWN_FEATURES)}
_REUSE = tuple(len(OWN_FEATURES) + b * len(ACCESS_FEATURE_NAMES) + ACCESS_FEATURE_NAMES.index("reuse_distance_bytes")
               for b in range(ACCESS_BUFFERS))
_UNIQUE = tuple(len(OWN_FEATURES) + b * len(ACCESS_FEATURE_NAMES) + ACCESS_FEATURE_NAMES.index("unique_bytes")
                for b in range(ACCESS_BUFFERS))
_DESC = {n: i for i, n in enumerate(DESCRIPTOR_FEATURES)}


def _ratio(log2_a: torch.Tensor, log2_b: torch.Tensor) -> torch.Tensor:
    return ((log2_a - log2_b) / 8.0).clamp(-2.0, 2.0)


def cache_fit_features(x: torch.Tensor, log2_caches: torch.Tensor, descriptor: torch.Tensor | None) -> torch.Tensor:
    """The cache-fit features of every token (module docstring), float32 ``(B, L, FIT_DIM)``.

    Args:
        x: float32 ``(B, L, F)`` raw token rows (a leaf's own features first).
        log2_caches: float32 ``(B, 3)`` log2 bytes of each program's device's L1 data cache,
            L2 and L3 (:func:`cdmpp.device.device_caches`).
        descriptor: float32 ``(B, DESCRIPTOR_DIM)`` each program's device descriptor
            (:func:`cdmpp.device.descriptor_vector`), or ``None``: a 2-core CPU with AVX-512.
    """
    x = x.float()
    b, length = x.shape[:2]
    leaf = (x[..., _OWN["program_leaves"]] > 0).to(x.dtype).unsqueeze(-1)  # every leaf row counts its program's leaves
    caches = log2_caches.float().view(b, 1, 1, 3)
    reuse = x[..., list(_REUSE)]  # log2(1 + bytes), 0 without reuse
    per_buffer = _ratio(reuse.unsqueeze(-1), caches) * (reuse > 0).to(x.dtype).unsqueeze(-1)
    touched = torch.log2(sum(torch.exp2(x[..., c]) - 1.0 for c in _UNIQUE).clamp_min(1.0))
    whole = _ratio(touched.unsqueeze(-1), caches.view(b, 1, 3))
    if descriptor is None:
        isa_bits = torch.full((b,), 512.0, device=x.device)
        log2_cores = torch.ones(b, device=x.device)
    else:
        d = descriptor.float()
        isa_bits = 512.0 * d[:, _DESC["isa_avx512"]] + 256.0 * d[:, _DESC["isa_avx2"]] + 128.0 * d[:, _DESC["isa_other"]]
        isa_bits = torch.where(d[:, _DESC["kind_gpu"]] > 0, torch.full_like(isa_bits, 1024.0), isa_bits.clamp_min(128.0))
        log2_cores = d[:, _DESC["log2_cores"]]
    vector_bits = x[..., _OWN["extent_vectorized"]] + torch.log2(x[..., _OWN["dtype_bits"]].clamp_min(1.0))
    vector = _ratio(vector_bits, torch.log2(isa_bits).view(b, 1)) * (x[..., _OWN["extent_vectorized"]] > 0)
    parallel = _ratio(x[..., _OWN["extent_parallel"]], log2_cores.view(b, 1)) * (x[..., _OWN["extent_parallel"]] > 0)
    out = torch.cat([per_buffer.reshape(b, length, -1), whole, vector.unsqueeze(-1), parallel.unsqueeze(-1)], dim=-1)
    return out * leaf
