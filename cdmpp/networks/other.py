"""Zoo architectures that ``transformers`` lacks beyond images, in plain torch (random
weights): MLP-Mixer, DLRM, R(2+1)D, PointNet, WaveNet and an LSTM language model.

Each class cites the paper it follows; sizes are the paper's base variant unless its
docstring says otherwise.
"""

from __future__ import annotations

import torch
from torch import nn


# ---------------------------------------------------------------- MLP-Mixer
class _MixerBlock(nn.Module):
    def __init__(self, tokens: int, dim: int, token_mlp: int, channel_mlp: int):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.tok = nn.Sequential(nn.Linear(tokens, token_mlp), nn.GELU(), nn.Linear(token_mlp, tokens))
        self.ch = nn.Sequential(nn.Linear(dim, channel_mlp), nn.GELU(), nn.Linear(channel_mlp, dim))

    def forward(self, x):
        x = x + self.tok(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.ch(self.ln2(x))


class MLPMixer(nn.Module):
    """MLP-Mixer B/16 (Tolstikhin et al. 2021, Table 1): width 768, token MLP 384, channel MLP 3072."""

    def __init__(self, image: int = 224, patch: int = 16, dim: int = 768, depth: int = 12):
        super().__init__()
        tokens = (image // patch) ** 2
        self.embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[_MixerBlock(tokens, dim, 384, 3072) for _ in range(depth)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1000)

    def forward(self, x):
        x = self.embed(x).flatten(2).transpose(1, 2)
        return self.head(self.ln(self.blocks(x)).mean(1))


# -------------------------------------------------------------- recommendation
class DLRM(nn.Module):
    """DLRM (Naumov et al. 2019) in the Criteo layout: 26 sparse features looked up in
    embedding tables of width 64 (100,000 rows each, summed over a bag of 1), 13 dense
    features through a 512-256-64 bottom MLP, pairwise dot-product interaction (batch
    matmul), and a 512-256-1 top MLP.

    Input: an ``int64`` tensor ``(batch, 39)``: 26 sparse ids, then 13 dense features as
    integers (cast to float inside, as log-bucketed counts are).
    """

    def __init__(self, tables: int = 26, rows: int = 100_000, dim: int = 64, dense: int = 13):
        super().__init__()
        self.tables, self.dense = tables, dense
        self.emb = nn.Embedding(tables * rows, dim)
        self.register_buffer("offsets", torch.arange(tables) * rows)
        self.bottom = nn.Sequential(nn.Linear(dense, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                    nn.Linear(256, dim), nn.ReLU())
        pairs = (tables + 1) * tables // 2
        self.top = nn.Sequential(nn.Linear(pairs + dim, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                                 nn.Linear(256, 1), nn.Sigmoid())
        iu = torch.triu_indices(tables + 1, tables + 1, offset=1)
        self.register_buffer("pair_index", iu[0] * (tables + 1) + iu[1])

    def forward(self, x):
        ids = x[:, : self.tables] + self.offsets
        d = self.bottom(x[:, self.tables:].float())
        feats = torch.cat([d[:, None, :], self.emb(ids)], 1)  # (batch, tables + 1, dim)
        inter = (feats @ feats.transpose(1, 2)).flatten(1)[:, self.pair_index]
        return self.top(torch.cat([d, inter], 1))


# ----------------------------------------------------------------------- video
class R2Plus1D(nn.Module):
    """R(2+1)D-18 (Tran et al. 2018): 3D ResNet-18 with each 3x3x3 convolution split into a
    1x3x3 spatial and a 3x1x1 temporal convolution; input ``(batch, 3, 8, 112, 112)``."""

    def __init__(self, num_classes: int = 400):
        super().__init__()

        def conv21(cin, cout, stride):
            mid = (cin * cout * 27) // (cin * 9 + 3 * cout)
            return nn.Sequential(
                nn.Conv3d(cin, mid, (1, 3, 3), (1, stride, stride), (0, 1, 1), bias=False), nn.BatchNorm3d(mid),
                nn.ReLU(), nn.Conv3d(mid, cout, (3, 1, 1), (stride, 1, 1), (1, 0, 0), bias=False), nn.BatchNorm3d(cout),
            )

        self.stem = nn.Sequential(nn.Conv3d(3, 45, (1, 7, 7), (1, 2, 2), (0, 3, 3), bias=False), nn.BatchNorm3d(45),
                                  nn.ReLU(), nn.Conv3d(45, 64, (3, 1, 1), 1, (1, 0, 0), bias=False),
                                  nn.BatchNorm3d(64), nn.ReLU())
        self.blocks = nn.ModuleList()
        cin = 64
        for i, c in enumerate((64, 128, 256, 512)):
            for j in range(2):
                stride = 2 if i and not j else 1
                down = None if stride == 1 and cin == c else nn.Sequential(
                    nn.Conv3d(cin, c, 1, stride, bias=False), nn.BatchNorm3d(c))
                self.blocks.append(nn.ModuleList([conv21(cin, c, stride), nn.ReLU(), conv21(c, c, 1),
                                                  down or nn.Identity()]))
                cin = c
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.stem(x)
        for a, relu, b, down in self.blocks:
            x = nn.functional.relu(b(relu(a(x))) + down(x))
        return self.fc(x.mean((2, 3, 4)))


# ------------------------------------------------------------- 1D / sequence
class PointNet(nn.Module):
    """PointNet classification network (Qi et al. 2017) without the input and feature
    transforms: shared MLPs (1x1 conv1d) 64-64-64-128-1024, max pool over the points,
    then 512-256-40; input ``(batch, 3, points)``."""

    def __init__(self, classes: int = 40):
        super().__init__()
        widths, layers, cin = (64, 64, 64, 128, 1024), [], 3
        for w in widths:
            layers += [nn.Conv1d(cin, w, 1), nn.BatchNorm1d(w), nn.ReLU()]
            cin = w
        self.mlp = nn.Sequential(*layers)
        self.head = nn.Sequential(nn.Linear(1024, 512), nn.BatchNorm1d(512), nn.ReLU(), nn.Linear(512, 256),
                                  nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, classes))

    def forward(self, x):
        return self.head(torch.max(self.mlp(x), 2)[0])


class WaveNet(nn.Module):
    """A WaveNet stack (van den Oord et al. 2016): causal dilated conv1d (kernel 2, dilations
    1..512, twice), gated tanh x sigmoid activations, residual and skip 1x1 convolutions;
    64 residual and 256 skip channels; input ``(batch, 1, samples)``."""

    def __init__(self, res: int = 64, skip: int = 256, dilations=tuple(2**i for i in range(10)) * 2):
        super().__init__()
        self.inp = nn.Conv1d(1, res, 1)
        self.dilations = dilations
        self.filt = nn.ModuleList(nn.Conv1d(res, res, 2, dilation=d) for d in dilations)
        self.gate = nn.ModuleList(nn.Conv1d(res, res, 2, dilation=d) for d in dilations)
        self.res = nn.ModuleList(nn.Conv1d(res, res, 1) for _ in dilations)
        self.skip = nn.ModuleList(nn.Conv1d(res, skip, 1) for _ in dilations)
        self.out = nn.Sequential(nn.ReLU(), nn.Conv1d(skip, skip, 1), nn.ReLU(), nn.Conv1d(skip, 256, 1))

    def forward(self, x):
        x, total = self.inp(x), 0
        for d, f, g, r, s in zip(self.dilations, self.filt, self.gate, self.res, self.skip):
            h = nn.functional.pad(x, (d, 0))
            z = torch.tanh(f(h)) * torch.sigmoid(g(h))
            x, total = x + r(z), total + s(z)
        return self.out(total)


class LSTMTagger(nn.Module):
    """A two-layer LSTM language model (Hochreiter & Schmidhuber 1997; Zaremba et al. 2014's
    medium size: 650 units, 10,000 words), unrolled over the sequence with ``nn.LSTMCell``."""

    def __init__(self, vocab: int = 10_000, hidden: int = 650, layers: int = 2):
        super().__init__()
        self.emb = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(nn.LSTMCell(hidden, hidden) for _ in range(layers))
        self.out = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.emb(ids)
        b, s, _ = x.shape
        for cell in self.cells:
            h = c = x.new_zeros(b, cell.hidden_size)
            outs = []
            for i in range(s):
                h, c = cell(x[:, i], (h, c))
                outs.append(h)
            x = torch.stack(outs, 1)
        return self.out(x)
