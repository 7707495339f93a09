import dataclasses

import numpy as np
import pytest
import torch

from cdmpp.errors import InputError
from cdmpp.model import LatencyTransformer, ModelConfig
from cdmpp.train.config import AdaptConfig
from cdmpp.train.shots import program_embeddings, select_programs


def _model():
    torch.manual_seed(0)
    return LatencyTransformer(ModelConfig(d_model=32, n_heads=2, n_layers=1, ff_dim=64, trace_tokens=False)).eval()


def test_kmeans_shots_are_distinct_candidates_chosen_without_labels(tiny_featurized):
    _, data = tiny_featurized
    model = _model()
    candidates = np.arange(1, len(data))
    shots = select_programs(model, data, candidates, AdaptConfig(shots=3))
    assert shots.dtype == np.int64 and len(set(shots.tolist())) == 3 and set(shots) <= set(candidates)
    assert np.all(np.diff(shots) > 0)
    relabelled = dataclasses.replace(data, latency=np.ones_like(data.latency))
    assert select_programs(model, relabelled, candidates, AdaptConfig(shots=3)).tolist() == shots.tolist()
    assert program_embeddings(model, data, candidates).shape == (len(candidates), 32)
    # asking for more shots than candidates takes them all; random choice is seeded
    assert select_programs(model, data, candidates, AdaptConfig(shots=99)).tolist() == candidates.tolist()
    r = AdaptConfig(shots=2, selection="random", seed=3)
    assert select_programs(model, data, candidates, r).tolist() == select_programs(model, data, candidates, r).tolist()
    with pytest.raises(InputError, match="no candidate"):
        select_programs(model, data, np.array([], dtype=np.int64), AdaptConfig())
    with pytest.raises(InputError, match="selection"):
        AdaptConfig(selection="greedy")
