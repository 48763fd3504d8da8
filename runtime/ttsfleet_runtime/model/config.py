"""The Qwen3-TTS checkpoint configuration, read from the official `config.json`.

Only the fields the engine uses are kept, under the official key names, so a
downloaded checkpoint and one written by `ttsfleet checkpoint --random` parse the
same way. The talker's multimodal RoPE (`mrope_section`, interleaved) is recorded
but not needed: for text-and-codec sequences the three position streams are equal,
which makes M-RoPE identical to ordinary 1-D RoPE.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """A Qwen3-style decoder stack (the talker's, or the code predictor's)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    num_code_groups: int
    hidden_act: str = "silu"
    attention_bias: bool = False

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecoderConfig:
        heads = d["num_attention_heads"]
        return cls(
            hidden_size=d["hidden_size"],
            intermediate_size=d["intermediate_size"],
            num_hidden_layers=d["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=d.get("num_key_value_heads") or heads,
            head_dim=d.get("head_dim") or d["hidden_size"] // heads,
            rms_norm_eps=d.get("rms_norm_eps", 1e-6),
            rope_theta=_rope_theta(d),
            max_position_embeddings=d.get("max_position_embeddings", 32768),
            vocab_size=d["vocab_size"],
            num_code_groups=d.get("num_code_groups", 16),
            hidden_act=d.get("hidden_act", "silu"),
            attention_bias=d.get("attention_bias", False),
        )


def _rope_theta(d: dict[str, Any]) -> float:
    # transformers 5 moved rope_theta into rope_parameters; accept both spellings.
    if "rope_theta" in d:
        return float(d["rope_theta"])
    params = d.get("rope_parameters") or {}
    return float(params.get("rope_theta", 10000.0))


@dataclasses.dataclass(frozen=True)
class TalkerConfig(DecoderConfig):
    text_hidden_size: int = 2048
    text_vocab_size: int = 151936
    codec_pad_id: int = 2148
    codec_bos_id: int = 2149
    codec_eos_token_id: int = 2150
    codec_think_id: int = 2154
    codec_nothink_id: int = 2155
    codec_think_bos_id: int = 2156
    codec_think_eos_id: int = 2157
    codec_language_id: dict[str, int] = dataclasses.field(default_factory=dict)
    spk_id: dict[str, int] = dataclasses.field(default_factory=dict)
    spk_is_dialect: dict[str, str | bool] = dataclasses.field(default_factory=dict)
    code_predictor: DecoderConfig | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TalkerConfig:
        base = DecoderConfig.from_dict(d)
        keys = [f.name for f in dataclasses.fields(cls) if f.name not in dataclasses.asdict(base)]
        extra = {k: d[k] for k in keys if k in d and k != "code_predictor"}
        return cls(
            **dataclasses.asdict(base),
            **extra,
            code_predictor=DecoderConfig.from_dict(d["code_predictor_config"]),
        )


@dataclasses.dataclass(frozen=True)
class SpeakerEncoderConfig:
    """`speaker_encoder_config` of a Base checkpoint: the ECAPA-TDNN that turns a log-mel
    spectrogram of a recording into the speaker embedding (`enc_dim` wide, the talker's
    width: the embedding stands in the prompt where a built-in speaker's token would).
    Defaults are the reference's; the published files set only `enc_dim` and
    `sample_rate`."""

    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple[int, ...] = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeakerEncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k in known}
        cfg = cls(**values)
        lengths = {len(cfg.enc_channels), len(cfg.enc_kernel_sizes), len(cfg.enc_dilations)}
        if len(lengths) != 1:
            raise ValueError("enc_channels, enc_kernel_sizes and enc_dilations differ in length")
        return cfg


# The speech tokenizers a checkpoint's `tokenizer_type` may name, by rate (Hz).
TOKENIZER_TYPES = {12: "qwen3_tts_tokenizer_12hz", 25: "qwen3_tts_tokenizer_25hz"}


@dataclasses.dataclass(frozen=True)
class TTSConfig:
    talker: TalkerConfig
    tokenizer_type: str  # one of TOKENIZER_TYPES' values
    tts_model_size: str  # "0b6" | "1b7" | "tiny"
    tts_model_type: str  # "base" | "custom_voice" | "voice_design"
    im_start_token_id: int
    im_end_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    # Base checkpoints only: the encoder of a reference recording's voice.
    speaker_encoder: SpeakerEncoderConfig | None = None
    raw: dict[str, Any] = dataclasses.field(repr=False, compare=False, default_factory=dict)

    @property
    def tokenizer_rate_hz(self) -> int:
        """12 or 25: the speech tokenizer's rate (`tokenizer_type`, checked when parsed)."""
        return next(rate for rate, name in TOKENIZER_TYPES.items() if name == self.tokenizer_type)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TTSConfig:
        tokenizer_type = d.get("tokenizer_type", TOKENIZER_TYPES[12])
        if tokenizer_type not in TOKENIZER_TYPES.values():
            raise ValueError(
                f"unknown tokenizer_type {tokenizer_type!r}; "
                f"known: {sorted(TOKENIZER_TYPES.values())}"
            )
        return cls(
            talker=TalkerConfig.from_dict(d["talker_config"]),
            tokenizer_type=tokenizer_type,
            tts_model_size=d.get("tts_model_size", ""),
            tts_model_type=d.get("tts_model_type", "custom_voice"),
            im_start_token_id=d.get("im_start_token_id", 151644),
            im_end_token_id=d.get("im_end_token_id", 151645),
            tts_pad_token_id=d.get("tts_pad_token_id", 151671),
            tts_bos_token_id=d.get("tts_bos_token_id", 151672),
            tts_eos_token_id=d.get("tts_eos_token_id", 151673),
            speaker_encoder=(
                SpeakerEncoderConfig.from_dict(d.get("speaker_encoder_config") or {})
                if d.get("tts_model_type") == "base"
                else None
            ),
            raw=d,
        )

    @classmethod
    def from_file(cls, path: str | Path) -> TTSConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))

    @property
    def num_code_groups(self) -> int:
        return self.talker.num_code_groups

    @property
    def codebook_size(self) -> int:
        assert self.talker.code_predictor is not None
        return self.talker.code_predictor.vocab_size
