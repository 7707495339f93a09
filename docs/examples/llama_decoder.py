"""A decoder of the LLaMA family outside the zoo, given to cdmpp as
``docs/examples/llama_decoder.py:build``.

Built from its ``transformers`` config with random weights (RMSNorm, SwiGLU, rotary
embeddings, grouped-query attention, a causal mask): width 512, 4 layers, 8 query and 2
key-value heads, a 1,000-token vocabulary, 64 tokens at batch 1.  LLaMA-style decoders
are kept out of the zoo (the held-out test networks include one), so none of its tasks is
trained on by name::

    cdmpp estimate docs/examples/llama_decoder.py:build
    cdmpp tune docs/examples/llama_decoder.py:build --work-dir runs/llama --trials 416 --trials-per-iter 16  # 26 tasks
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM


class Decoder(torch.nn.Module):
    """The causal decoder's logits for a batch of token ids."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=1000, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                          num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
        self.lm = LlamaForCausalLM(cfg).eval()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=ids, use_cache=False).logits


def build():
    """``(model, example inputs)``: the decoder and 64 random token ids at batch 1."""
    torch.manual_seed(1)
    return Decoder(), (torch.randint(0, 1000, (1, 64)),)
