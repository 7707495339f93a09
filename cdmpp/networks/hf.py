"""Zoo architectures built from ``transformers`` configs (random weights, nothing downloaded).

Each :class:`HFArch` names a ``transformers`` config class, its model class and the
config values of one published size (the paper's or the model card's base or small
variant).  :class:`HFNetwork` wraps the model so that ``torch.export`` sees one input
tensor and one output tensor.
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass, field

from torch import nn


@dataclass(frozen=True)
class HFArch:
    """One architecture of the ``transformers`` package.

    Attributes:
        arch: the zoo's architecture name, e.g. ``"swin_tiny"``.
        family: the zoo family (leave-family-out folds group by it).
        config: name of the config class in ``transformers``, e.g. ``"SwinConfig"``.
        model: name of the model class, e.g. ``"SwinModel"``.
        kind: the input kind of :data:`cdmpp.networks.INPUT_KINDS` (``"img"``, ``"seq"``, ...).
        values: config values that differ from the class defaults (the published size).
        seq2seq: the model also takes ``decoder_input_ids`` (the same ids are fed to both sides).
        input_name: the keyword of the model's input (``pixel_values``, ``input_ids``, ...).
    """

    arch: str
    family: str
    config: str
    model: str
    kind: str
    values: dict = field(default_factory=dict)
    seq2seq: bool = False
    input_name: str = ""

    @property
    def source(self) -> str:
        return f"transformers.{self.model.rpartition('.')[2]} ({self.config})"

    def build(self) -> nn.Module:
        """The model with random weights, wrapped as :class:`HFNetwork`."""
        import transformers  # noqa: PLC0415  (keeps transformers off the zoo's import)

        cfg = getattr(transformers, self.config)(**self.values)
        cfg._attn_implementation = "eager"  # plain matmul + softmax attention: the form Relax imports
        owner, _, name = f"transformers.{self.model}".rpartition(".")
        model = getattr(importlib.import_module(owner), name)(cfg)
        name = self.input_name or ("pixel_values" if self.kind.startswith("img") else "input_ids")
        return HFNetwork(model, name, self.seq2seq)


class HFNetwork(nn.Module):
    """A ``transformers`` model called with one keyword input; returns its first output tensor."""

    def __init__(self, model: nn.Module, input_name: str, seq2seq: bool):
        super().__init__()
        self.model, self.input_name, self.seq2seq = model, input_name, seq2seq
        # no key/value cache: its empty first tensors do not import into Relax, and one forward pass needs none
        self.no_cache = "use_cache" in inspect.signature(model.forward).parameters

    def forward(self, x):
        kwargs = {self.input_name: x, "return_dict": True}
        if self.seq2seq:
            kwargs["decoder_input_ids"] = x
        if self.no_cache:
            kwargs["use_cache"] = False
        out = self.model(**kwargs)
        return out.last_hidden_state if getattr(out, "last_hidden_state", None) is not None else out[0]


_BASE = {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}

HF_ARCHS: tuple[HFArch, ...] = (
    # vision
    HFArch("swin_tiny", "swin", "SwinConfig", "SwinModel", "img"),
    HFArch("swinv2_tiny", "swin", "Swinv2Config", "Swinv2Model", "img256"),
    HFArch("deit_small", "deit", "DeiTConfig", "DeiTModel", "img",
           {"hidden_size": 384, "num_attention_heads": 6, "intermediate_size": 1536}),
    HFArch("beit_base", "beit", "BeitConfig", "BeitModel", "img", {"use_relative_position_bias": True}),
    HFArch("dinov2_small", "dinov2", "Dinov2Config", "Dinov2Model", "img",
           {"hidden_size": 384, "num_attention_heads": 6, "image_size": 224, "patch_size": 14}),
    HFArch("cvt_13", "cvt", "CvtConfig", "CvtModel", "img"),
    HFArch("levit_128s", "levit", "LevitConfig", "LevitModel", "img"),
    HFArch("poolformer_s12", "poolformer", "PoolFormerConfig", "PoolFormerModel", "img"),
    HFArch("regnet_y_4gf", "regnet", "RegNetConfig", "RegNetModel", "img"),
    HFArch("mobilenet_v1", "mobilenet_v1", "MobileNetV1Config", "MobileNetV1Model", "img"),
    HFArch("efficientnet_b1", "efficientnet", "EfficientNetConfig", "EfficientNetModel", "img240",
           {"width_coefficient": 1.0, "depth_coefficient": 1.1, "image_size": 240, "hidden_dim": 1280}),
    HFArch("efficientnet_b3", "efficientnet", "EfficientNetConfig", "EfficientNetModel", "img300",
           {"width_coefficient": 1.2, "depth_coefficient": 1.4, "image_size": 300, "hidden_dim": 1536}),
    HFArch("mobilevit_s", "mobilevit", "MobileViTConfig", "MobileViTModel", "img256"),
    HFArch("segformer_b0", "segformer", "SegformerConfig", "SegformerModel", "img"),
    HFArch("bit_50", "bit", "BitConfig", "BitModel", "img"),
    HFArch("focalnet_tiny", "focalnet", "FocalNetConfig", "FocalNetModel", "img"),
    HFArch("pvt_v2_b0", "pvt", "PvtV2Config", "PvtV2Model", "img"),
    HFArch("clip_vit_b32", "clip", "CLIPVisionConfig", "CLIPVisionModel", "img"),
    HFArch("yolos_tiny", "yolos", "YolosConfig", "YolosModel", "img",
           {"hidden_size": 192, "num_attention_heads": 3, "intermediate_size": 768, "image_size": [224, 224]}),
    # encoders
    HFArch("distilbert", "distilbert", "DistilBertConfig", "DistilBertModel", "seq512"),
    HFArch("albert_base", "albert", "AlbertConfig", "AlbertModel", "seq512", dict(_BASE)),
    HFArch("electra_small", "electra", "ElectraConfig", "ElectraModel", "seq512"),
    HFArch("deberta_v2_base", "deberta", "DebertaV2Config", "DebertaV2Model", "seq512", dict(_BASE)),
    HFArch("mpnet_base", "mpnet", "MPNetConfig", "MPNetModel", "seq512"),
    HFArch("mobilebert", "mobilebert", "MobileBertConfig", "MobileBertModel", "seq512"),
    HFArch("squeezebert", "squeezebert", "SqueezeBertConfig", "SqueezeBertModel", "seq512"),
    HFArch("xlnet_base", "xlnet", "XLNetConfig", "XLNetModel", "seq512"),
    HFArch("clip_text", "clip", "CLIPTextConfig", "CLIPTextModel", "seq77"),
    HFArch("roformer_base", "roformer", "RoFormerConfig", "RoFormerModel", "seq512"),
    # encoder-decoders
    HFArch("t5_small", "t5", "T5Config", "T5Model", "seq512", seq2seq=True),
    HFArch("bart_base", "bart", "BartConfig", "BartModel", "seq512",
           {"d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
            "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072}, seq2seq=True),
    HFArch("pegasus_small", "pegasus", "PegasusConfig", "PegasusModel", "seq512",
           {"d_model": 512, "encoder_layers": 8, "decoder_layers": 8, "encoder_attention_heads": 8,
            "decoder_attention_heads": 8, "encoder_ffn_dim": 2048, "decoder_ffn_dim": 2048}, seq2seq=True),
    # decoders
    HFArch("opt_350m", "opt", "OPTConfig", "OPTModel", "seq512",
           {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "ffn_dim": 4096,
            "word_embed_proj_dim": 512, "do_layer_norm_before": False}),
    HFArch("gpt_neo_125m", "gpt_neo", "GPTNeoConfig", "GPTNeoModel", "seq512",
           {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "attention_types": [[["global", "local"], 6]]}),
    HFArch("bloom_560m", "bloom", "BloomConfig", "BloomModel", "seq512", {"hidden_size": 1024, "n_layer": 24, "n_head": 16}),
    HFArch("falcon_1b", "falcon", "FalconConfig", "FalconModel", "seq512",
           {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "multi_query": True,
            "parallel_attn": True, "alibi": False}),
    HFArch("phi_1", "phi", "PhiConfig", "PhiModel", "seq512",
           {"hidden_size": 2048, "num_hidden_layers": 24, "num_attention_heads": 32, "intermediate_size": 8192}),
    HFArch("pythia_160m", "gpt_neox", "GPTNeoXConfig", "GPTNeoXModel", "seq512",
           {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072,
            "rotary_pct": 0.25}),
    HFArch("mpt_125m", "mpt", "MptConfig", "MptModel", "seq512", {"d_model": 768, "n_heads": 12, "n_layers": 12}),
    # speech
    HFArch("wav2vec2_base", "wav2vec2", "Wav2Vec2Config", "Wav2Vec2Model", "audio", input_name="input_values"),
    HFArch("whisper_tiny_encoder", "whisper", "WhisperConfig", "models.whisper.modeling_whisper.WhisperEncoder", "mel",
           {"d_model": 384, "encoder_layers": 4, "encoder_attention_heads": 6, "encoder_ffn_dim": 1536},
           input_name="input_features"),
)
