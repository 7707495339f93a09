"""Few-shot programs of a new device, chosen by KMeans over the model's embeddings (CDMPP,
EuroSys 2024, section 5) or at random."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.cluster import KMeans

from cdmpp.errors import InputError
from cdmpp.featurize.batch import FeaturizedPrograms
from cdmpp.model import LatencyTransformer

from .config import AdaptConfig


@torch.no_grad()
def program_embeddings(
    model: LatencyTransformer, data: FeaturizedPrograms, index: np.ndarray, batch_size: int = 512
) -> np.ndarray:
    """Pooled program embeddings, float32 ``(len(index), d_model)``."""
    from .lightning import ProgramDataModule  # noqa: PLC0415  (Lightning)

    dm = ProgramDataModule(data, [], [], np.asarray(index, dtype=np.int64), batch_size)
    model.eval()
    out = [model.pooled(b["x"], b["pos"], b["mask"]) for b in dm.predict_dataloader()]
    return torch.cat(out).numpy() if out else np.zeros((0, model.config.d_model), dtype=np.float32)


def select_programs(model: LatencyTransformer, data: FeaturizedPrograms, candidates: np.ndarray,
                    config: AdaptConfig) -> np.ndarray:
    """At most ``config.shots`` programs of ``candidates`` to measure, chosen without latencies.

    CDMPP's KMeans-based sampling (EuroSys 2024, section 5): the candidates' pooled
    embeddings are clustered into ``shots`` clusters (scikit-learn's ``KMeans``) and the
    program nearest each centroid is chosen, so that the few measured programs cover the
    program space.  ``config.selection == "random"`` draws them at random instead.

    Args:
        candidates: int64 ``(N,)`` program indices into ``data``.

    Returns:
        int64 ``(min(shots, N),)`` sorted program indices.

    Raises:
        InputError: no candidate.
    """
    candidates = np.asarray(candidates, dtype=np.int64)
    if candidates.size == 0:
        raise InputError("no candidate program to choose shots from")
    k = min(config.shots, candidates.size)
    if config.selection == "random" or k == candidates.size:
        return np.sort(np.random.default_rng(config.seed).choice(candidates, size=k, replace=False))
    emb = program_embeddings(model, data, candidates).astype(np.float64)
    km = KMeans(n_clusters=k, n_init=4, random_state=config.seed).fit(emb)
    dist = km.transform(emb)  # (N, k) distance of each program to each centroid
    chosen: list[int] = []
    taken = np.zeros(candidates.size, dtype=bool)
    for c in range(k):  # the nearest not-yet-chosen program of each centroid
        order = np.argsort(dist[:, c])
        j = next(int(j) for j in order if not taken[j])
        taken[j] = True
        chosen.append(int(candidates[j]))
    return np.sort(np.asarray(chosen, dtype=np.int64))


