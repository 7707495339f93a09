"""A convolutional network outside the zoo, given to cdmpp as ``docs/examples/convnext.py:build``.

A ConvNeXt (Liu et al. 2022; ``transformers``' ``ConvNextForImageClassification``) built from
its config with random weights, in the shape of ConvNeXt-T cut to half its width: 4x4
patchify stem, stages of 3, 3, 9 and 3 blocks at widths 48, 96, 192 and 384 (7x7 depthwise
convolutions, LayerNorm, an inverted MLP), a 224x224 image at batch 1.  No zoo network is
a ConvNeXt::

    cdmpp estimate docs/examples/convnext.py:build
    cdmpp tune docs/examples/convnext.py:build --work-dir runs/convnext --trials 720 --trials-per-iter 16  # 45 tasks
"""

import torch
from transformers import ConvNextConfig, ConvNextForImageClassification


class ConvNeXt(torch.nn.Module):
    """The classifier's logits for a batch of images."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        cfg = ConvNextConfig(hidden_sizes=[48, 96, 192, 384], depths=[3, 3, 9, 3], num_labels=1000)
        self.net = ConvNextForImageClassification(cfg).eval()

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.net(pixel_values=pixels).logits


def build():
    """``(model, example inputs)``: the ConvNeXt and one random 224x224 RGB image."""
    torch.manual_seed(1)
    return ConvNeXt(), (torch.randn(1, 3, 224, 224),)
