"""A CNN-attention hybrid outside the zoo, given to cdmpp as ``docs/examples/swiftformer.py:build``.

A SwiftFormer (Shaker et al., ICCV 2023; ``transformers``' ``SwiftFormerForImageClassification``)
built from its default config (SwiftFormer-XS) with random weights: convolutional stages
of depthwise and pointwise convolutions, each ending in an encoder whose attention is
additive (linear in the tokens), a 224x224 image at batch 1.  No zoo network is a
SwiftFormer::

    cdmpp estimate docs/examples/swiftformer.py:build
    cdmpp tune docs/examples/swiftformer.py:build --work-dir runs/swiftformer --trials 1440 --trials-per-iter 16  # 90 tasks
"""

import torch
from transformers import SwiftFormerConfig, SwiftFormerForImageClassification


class SwiftFormer(torch.nn.Module):
    """The classifier's logits for a batch of images."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = SwiftFormerForImageClassification(SwiftFormerConfig(num_labels=1000)).eval()

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values=pixels).logits


def build():
    """``(model, example inputs)``: the SwiftFormer and one random 224x224 RGB image."""
    torch.manual_seed(1)
    return SwiftFormer(), (torch.randn(1, 3, 224, 224),)
