"""Configuration of the 12 Hz speech tokenizer (`speech_tokenizer/config.json`).

The file's keys are the official ones (model_type `qwen3_tts_tokenizer_12hz`), so a
downloaded checkpoint and one written by `checkpoint.speech_tokenizer_files` read the same way.
The encoder (a Mimi model, for voice cloning) is kept as the raw dict it was read from,
which the writer copies as is; `CodecEncoderConfig` types the keys the encoder runs on.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

MODEL_TYPE = "qwen3_tts_tokenizer_12hz"


@dataclasses.dataclass(frozen=True)
class CodecDecoderConfig:
    """`decoder_config` of the speech tokenizer: codes [T, Q] -> 1920 samples per frame."""

    codebook_size: int = 2048
    codebook_dim: int = 512
    latent_dim: int = 1024
    hidden_size: int = 512
    intermediate_size: int = 1024
    num_hidden_layers: int = 8
    num_attention_heads: int = 16
    num_key_value_heads: int = 16
    head_dim: int = 64
    hidden_act: str = "silu"
    attention_bias: bool = False
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8000
    sliding_window: int = 72
    layer_scale_initial_scale: float = 0.01
    num_quantizers: int = 16
    num_semantic_quantizers: int = 1
    semantic_codebook_size: int = 4096
    vector_quantization_hidden_dimension: int = 512
    upsample_rates: tuple[int, ...] = (8, 5, 4, 3)
    upsampling_ratios: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsampling_ratios) * math.prod(self.upsample_rates)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodecDecoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        for key in ("upsample_rates", "upsampling_ratios"):
            if key in values:
                values[key] = tuple(values[key])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["upsample_rates"] = list(self.upsample_rates)
        out["upsampling_ratios"] = list(self.upsampling_ratios)
        return out


@dataclasses.dataclass(frozen=True)
class CodecEncoderConfig:
    """`encoder_config` of the speech tokenizer (a Mimi encoder): 24 kHz audio -> codes.

    Defaults are the published tokenizer's."""

    audio_channels: int = 1
    sampling_rate: int = 24000
    frame_rate: float = 12.5  # the file's `_frame_rate`
    num_filters: int = 64
    kernel_size: int = 7
    residual_kernel_size: int = 3
    last_kernel_size: int = 3
    num_residual_layers: int = 1
    dilation_growth_rate: int = 2
    compress: int = 2
    upsampling_ratios: tuple[int, ...] = (8, 6, 5, 4)
    hidden_size: int = 512
    num_hidden_layers: int = 8
    num_attention_heads: int = 8
    num_key_value_heads: int = 8
    head_dim: int = 64
    intermediate_size: int = 2048
    hidden_act: str = "gelu"
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    attention_bias: bool = False
    num_semantic_quantizers: int = 1
    codebook_size: int = 2048
    codebook_dim: int = 256
    vector_quantization_hidden_dimension: int = 256

    @property
    def seanet_stride(self) -> int:
        """Samples per frame of the convolutional encoder (25 Hz for the published one)."""
        return math.prod(self.upsampling_ratios)

    @property
    def downsample_kernel(self) -> int:
        """Kernel of the conv from the encoder's rate to the frame rate: twice Mimi's
        `encodec_frame_rate / frame_rate` (its stride is 2 whatever that ratio)."""
        return 2 * int(self.sampling_rate / self.seanet_stride / self.frame_rate)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> CodecEncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known}
        if "_frame_rate" in raw:
            values["frame_rate"] = raw["_frame_rate"]
        if "upsampling_ratios" in values:
            values["upsampling_ratios"] = tuple(values["upsampling_ratios"])
        if raw.get("use_conv_shortcut") or not raw.get("use_causal_conv", True):
            raise ValueError("only causal Mimi encoders without conv shortcuts are supported")
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class SpeechTokenizerConfig:
    decoder: CodecDecoderConfig
    encoder: dict[str, Any]
    encoder_valid_num_quantizers: int = 16
    input_sample_rate: int = 24000
    output_sample_rate: int = 24000
    decode_upsample_rate: int = 1920
    encode_downsample_rate: int = 1920

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeechTokenizerConfig:
        if raw.get("model_type", MODEL_TYPE) != MODEL_TYPE:
            raise ValueError(f"not a 12 Hz speech tokenizer: model_type={raw.get('model_type')!r}")
        cfg = cls(
            decoder=CodecDecoderConfig.from_dict(raw.get("decoder_config", {})),
            encoder=dict(raw.get("encoder_config", {})),
            **{
                k: raw[k]
                for k in (
                    "encoder_valid_num_quantizers",
                    "input_sample_rate",
                    "output_sample_rate",
                    "decode_upsample_rate",
                    "encode_downsample_rate",
                )
                if k in raw
            },
        )
        if cfg.decoder.samples_per_frame != cfg.decode_upsample_rate:
            raise ValueError(
                f"decoder upsamples by {cfg.decoder.samples_per_frame}, "
                f"config says decode_upsample_rate={cfg.decode_upsample_rate}"
            )
        return cfg

    @classmethod
    def from_dir(cls, directory: str | Path) -> SpeechTokenizerConfig:
        return cls.from_dict(json.loads((Path(directory) / "config.json").read_text()))

    def to_dict(self) -> dict[str, Any]:
        return {
            "architectures": ["Qwen3TTSTokenizerV2Model"],
            "model_type": MODEL_TYPE,
            "encoder_valid_num_quantizers": self.encoder_valid_num_quantizers,
            "input_sample_rate": self.input_sample_rate,
            "output_sample_rate": self.output_sample_rate,
            "decode_upsample_rate": self.decode_upsample_rate,
            "encode_downsample_rate": self.encode_downsample_rate,
            "encoder_config": dict(self.encoder),
            "decoder_config": self.decoder.to_dict(),
        }


# The published tokenizer's Mimi encoder (one size, shared by the 0.6B and 1.7B models).
_REAL_ENCODER = {
    "audio_channels": 1,
    "sampling_rate": 24000,
    "_frame_rate": 12.5,
    "num_filters": 64,
    "kernel_size": 7,
    "residual_kernel_size": 3,
    "last_kernel_size": 3,
    "num_residual_layers": 1,
    "dilation_growth_rate": 2,
    "compress": 2,
    "upsampling_ratios": [8, 6, 5, 4],
    "use_causal_conv": True,
    "pad_mode": "constant",
    "use_conv_shortcut": False,
    "trim_right_ratio": 1.0,
    "upsample_groups": 512,
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "intermediate_size": 2048,
    "hidden_act": "gelu",
    "norm_eps": 1e-5,
    "layer_scale_initial_scale": 0.01,
    "rope_theta": 10000.0,
    "max_position_embeddings": 8000,
    "sliding_window": 250,
    "attention_bias": False,
    "num_quantizers": 32,
    "num_semantic_quantizers": 1,
    "codebook_size": 2048,
    "codebook_dim": 256,
    "vector_quantization_hidden_dimension": 256,
    "use_cache": False,
    "model_type": "mimi",
}

# Tiny dimensions for CPU tests. Frame geometry (16 code groups of 2048 entries, 1920
# samples per frame) stays real so engine code sees the same shapes; the window is short
# so a test of a few dozen frames crosses it.
_TINY_DECODER = CodecDecoderConfig(
    codebook_dim=16,
    latent_dim=32,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    sliding_window=8,
    vector_quantization_hidden_dimension=16,
    decoder_dim=32,
)
_TINY_ENCODER = dict(
    _REAL_ENCODER,
    num_filters=4,
    hidden_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=8,
    intermediate_size=32,
    num_quantizers=16,
    codebook_dim=8,
    vector_quantization_hidden_dimension=8,
    upsample_groups=16,
)

SIZES = ("tiny", "real")


def speech_tokenizer_config(size: str) -> SpeechTokenizerConfig:
    """The speech tokenizer config for `size` in SIZES ("real" is the published one)."""
    if size == "real":
        return SpeechTokenizerConfig(decoder=CodecDecoderConfig(), encoder=dict(_REAL_ENCODER))
    if size == "tiny":
        return SpeechTokenizerConfig(decoder=_TINY_DECODER, encoder=dict(_TINY_ENCODER))
    raise ValueError(f"unknown speech tokenizer size {size!r}; expected one of {SIZES}")
