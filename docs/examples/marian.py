"""An encoder-decoder outside the zoo, given to cdmpp as ``docs/examples/marian.py:build``.

A Marian translation model (Junczys-Dowmunt et al. 2018; ``transformers``' ``MarianMTModel``)
built from its config with random weights: width 256, 3 encoder and 3 decoder layers, 4
heads, feed-forward 1,024, an 8,000-token vocabulary, 32 source and 32 target tokens at
batch 1 (the decoder's causal self-attention and its cross-attention over the encoder).
The zoo's encoder-decoders (BART, Pegasus, T5) have other widths, so its dense layers are
not in any dataset::

    cdmpp estimate docs/examples/marian.py:build
    cdmpp tune docs/examples/marian.py:build --work-dir runs/marian --trials 352 --trials-per-iter 16  # 22 tasks
"""

import torch
from transformers import MarianConfig, MarianMTModel


class Translator(torch.nn.Module):
    """The decoder's logits for a batch of source and target token ids."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        cfg = MarianConfig(vocab_size=8000, d_model=256, encoder_layers=3, decoder_layers=3,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
                           decoder_ffn_dim=1024, max_position_embeddings=128, pad_token_id=0,
                           decoder_start_token_id=0)
        self.mt = MarianMTModel(cfg).eval()

    def forward(self, ids: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return self.mt(input_ids=ids, decoder_input_ids=target, use_cache=False).logits


def build():
    """``(model, example inputs)``: the translator, 32 source and 32 target token ids at batch 1."""
    torch.manual_seed(1)
    return Translator(), (torch.randint(1, 8000, (1, 32)), torch.randint(1, 8000, (1, 32)))
