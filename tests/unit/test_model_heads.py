"""The log-sum-exp head: a latency term per token, summed as times add up."""

import numpy as np
import pytest
import torch

from cdmpp.errors import InputError
from cdmpp.featurize import FEATURE_DIM
from cdmpp.model import LatencyTransformer, ModelConfig


def _model(**kw):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=16, n_heads=2, n_layers=1, ff_dim=32, pooling="lse", trace_tokens=False, **kw)
    m = LatencyTransformer(cfg).eval()
    m.label_mean.fill_(-9.0)
    m.label_std.fill_(2.0)
    return m

def test_the_lse_head_sums_each_tokens_latency():
    m = _model()
    x = torch.randn(2, 5, FEATURE_DIM)
    pos = torch.arange(5).expand(2, 5)
    mask = torch.tensor([[True, True, True, False, False], [True] * 5])
    with torch.no_grad():
        terms = m.head(m.encoded(x, pos, mask)).squeeze(-1) * 2.0 - 9.0  # natural log of seconds per token
        got = m.predict_log_latency(x, pos, mask)
        seconds = [np.exp(terms[b][mask[b]].numpy().astype(np.float64)).sum() for b in range(2)]
        np.testing.assert_allclose(got.numpy(), np.log(seconds), rtol=1e-5)
        assert torch.all(got >= terms.masked_fill(~mask, -1e9).max(1).values - 1e-5)  # no less than its slowest
        # padding changes nothing: the first program alone, unpadded
        alone = m.predict_log_latency(x[:1, :3], pos[:1, :3], mask[:1, :3])
        np.testing.assert_allclose(alone.numpy(), got[:1].numpy(), rtol=1e-5)

def test_the_lse_head_reads_the_device_and_a_bad_pooling_is_refused():
    m = _model(num_devices=2)
    x, pos = torch.randn(3, 4, FEATURE_DIM), torch.arange(4).expand(3, 4)
    mask = torch.ones(3, 4, dtype=torch.bool)
    with torch.no_grad():
        torch.nn.init.normal_(m.device_embedding.weight, std=1.0)
        out = m.predict_log_latency(x, pos, mask, torch.tensor([0, 1, 2]))
        same = m.predict_log_latency(x[:1].expand(3, -1, -1), pos, mask, torch.tensor([0, 1, 2]))
    assert out.shape == (3,) and torch.all(torch.isfinite(out))
    assert len(set(np.round(same.numpy(), 5))) == 3  # one program, three devices, three latencies
    assert m.pooled(x, pos, mask).shape == (3, 16)  # the embedding that selection and CMD read
    with pytest.raises(InputError, match="pooling must be one of"):
        ModelConfig(pooling="median")
