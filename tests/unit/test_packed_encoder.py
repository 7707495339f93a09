"""The encoder on the real tokens only computes what the padded encoder computes."""

import torch
from torch import nn

from cdmpp.featurize import FEATURE_DIM
from cdmpp.model import LatencyTransformer, ModelConfig, encode_packed


def _encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, 0.1, activation="gelu", batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def _batch():
    lengths = torch.tensor([7, 2, 5, 1])
    mask = torch.arange(7)[None, :] < lengths[:, None]
    return torch.randn(4, 7, 16, requires_grad=True), mask


def test_packed_encoder_matches_the_padded_one_and_its_gradients():
    enc = _encoder().eval()
    h, mask = _batch()
    want = enc(h, src_key_padding_mask=~mask)
    got = encode_packed(enc.layers, h, mask)
    torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
    assert torch.all(got[~mask] == 0)
    params = [h, *enc.parameters()]
    g_want = torch.autograd.grad((want[mask] ** 2).sum(), params)
    g_got = torch.autograd.grad((got[mask] ** 2).sum(), params)
    for a, b in zip(g_got, g_want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_packed_encoder_ignores_padding_and_drops_out_in_training():
    enc = _encoder()
    h, mask = _batch()
    with torch.no_grad():
        enc.eval()
        clean = encode_packed(enc.layers, h, mask)
        noisy = h.clone()
        noisy[~mask] = 1e3  # whatever sits on the padding
        torch.testing.assert_close(encode_packed(enc.layers, noisy, mask), clean)
        enc.train()
        assert not torch.allclose(encode_packed(enc.layers, h, mask)[mask], clean[mask])


def test_the_model_predicts_a_program_alike_alone_or_beside_a_longer_one():
    torch.manual_seed(0)
    m = LatencyTransformer(ModelConfig(d_model=16, n_heads=2, n_layers=2, ff_dim=32, trace_tokens=False)).eval()
    x, pos = torch.randn(2, 6, FEATURE_DIM), torch.arange(6).expand(2, 6)
    mask = torch.tensor([[True] * 3 + [False] * 3, [True] * 6])
    with torch.no_grad():
        both = m.predict_log_latency(x, pos, mask)
        alone = m.predict_log_latency(x[:1, :3], pos[:1, :3], mask[:1, :3])
    torch.testing.assert_close(alone, both[:1], rtol=1e-5, atol=1e-5)
