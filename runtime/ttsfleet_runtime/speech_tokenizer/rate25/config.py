"""Configuration of the 25 Hz speech tokenizer (`speech_tokenizer/config.json`, v1 layout).

Only the decoder half is typed here (`decoder_config`: `dit_config` for the mel generator,
`bigvgan_config` for the vocoder) plus the top-level sample rates; the encoder half belongs
to the cloning path. Keys and defaults are the official ones (model_type
`qwen3_tts_tokenizer_25hz`), so a downloaded folder and one our checkpoint writer produced
read the same way. Keys we do not run on (Hugging Face bookkeeping) are ignored.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

MODEL_TYPE = "qwen3_tts_tokenizer_25hz"


class ConfigError(ValueError):
    """The speech tokenizer's config.json cannot describe a 25 Hz decoder."""


@dataclasses.dataclass(frozen=True)
class MelGeneratorConfig:
    """`dit_config`: codes -> mel frames by a block-wise DiT, conditioned on a speaker."""

    hidden_size: int = 1024
    num_hidden_layers: int = 22
    num_attention_heads: int = 16
    ff_mult: int = 2
    emb_dim: int = 512
    head_dim: int = 64
    block_size: int = 24  # mel frames per attention block
    look_ahead_layers: tuple[int, ...] = (10,)
    look_backward_layers: tuple[int, ...] = (0, 20)
    repeats: int = 2  # mel frames per code
    num_embeds: int = 8193
    mel_dim: int = 80
    enc_emb_dim: int = 192  # x-vector
    enc_dim: int = 128  # reference-mel encoder output
    enc_channels: tuple[int, ...] = (256, 256, 256, 256, 768)
    enc_kernel_sizes: tuple[int, ...] = (5, 3, 3, 3, 1)
    enc_dilations: tuple[int, ...] = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 64
    enc_res2net_scale: int = 2
    enc_se_channels: int = 64

    @property
    def codes_per_block(self) -> int:
        return self.block_size // self.repeats

    def validate(self) -> None:
        if not len(self.enc_channels) == len(self.enc_kernel_sizes) == len(self.enc_dilations):
            raise ConfigError(
                "dit_config: enc_channels, enc_kernel_sizes and enc_dilations differ in length"
            )
        if self.block_size % self.repeats:
            raise ConfigError(
                f"dit_config: block_size {self.block_size} is not a whole number of codes "
                f"(repeats {self.repeats})"
            )


@dataclasses.dataclass(frozen=True)
class VocoderConfig:
    """`bigvgan_config`: mel frames -> waveform."""

    mel_dim: int = 80
    upsample_initial_channel: int = 1536
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    upsample_rates: tuple[int, ...] = (5, 3, 2, 2, 2, 2)
    upsample_kernel_sizes: tuple[int, ...] = (11, 7, 4, 4, 4, 4)

    @property
    def samples_per_mel_frame(self) -> int:
        return math.prod(self.upsample_rates)

    def validate(self) -> None:
        if len(self.upsample_rates) != len(self.upsample_kernel_sizes):
            raise ConfigError("bigvgan_config: upsample_rates and upsample_kernel_sizes differ")
        if len(self.resblock_kernel_sizes) != len(self.resblock_dilation_sizes):
            raise ConfigError(
                "bigvgan_config: resblock_kernel_sizes and resblock_dilation_sizes differ"
            )
        if self.upsample_initial_channel >> len(self.upsample_rates) < 1:
            raise ConfigError(
                f"bigvgan_config: upsample_initial_channel {self.upsample_initial_channel} "
                f"halves to nothing over {len(self.upsample_rates)} upsampling layers"
            )


@dataclasses.dataclass(frozen=True)
class SpeechTokenizer25HzConfig:
    mel_generator: MelGeneratorConfig = MelGeneratorConfig()
    vocoder: VocoderConfig = VocoderConfig()
    output_sample_rate: int = 24000
    # What the file declares; the reference trims audio to codes * this. The vocoder's own
    # rate (`samples_per_code`) is what the decoder produces and what we trim to.
    decode_upsample_rate: int = 1920

    @property
    def samples_per_code(self) -> int:
        return self.mel_generator.repeats * self.vocoder.samples_per_mel_frame

    @property
    def frame_rate(self) -> float:
        return self.output_sample_rate / self.samples_per_code

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> SpeechTokenizer25HzConfig:
        if raw.get("model_type") != MODEL_TYPE:
            raise ConfigError(f"model_type is {raw.get('model_type')!r}, expected {MODEL_TYPE!r}")
        decoder = raw.get("decoder_config") or {}
        if not isinstance(decoder, dict):
            raise ConfigError("decoder_config must be an object")
        config = cls(
            mel_generator=_typed(MelGeneratorConfig, decoder.get("dit_config") or {}, "dit_config"),
            vocoder=_typed(VocoderConfig, decoder.get("bigvgan_config") or {}, "bigvgan_config"),
            **{
                key: int(raw[key])
                for key in ("output_sample_rate", "decode_upsample_rate")
                if key in raw
            },
        )
        config.mel_generator.validate()
        config.vocoder.validate()
        if config.mel_generator.mel_dim != config.vocoder.mel_dim:
            raise ConfigError(
                f"dit_config.mel_dim {config.mel_generator.mel_dim} != "
                f"bigvgan_config.mel_dim {config.vocoder.mel_dim}"
            )
        return config


def _typed(cls: type, raw: dict[str, Any], section: str) -> Any:
    """cls from the known keys of raw, lists as tuples; a clear error on a wrong type."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{section} must be an object")
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if field.name not in raw:
            continue
        value = raw[field.name]
        default = field.default
        try:
            if isinstance(default, tuple) and default and isinstance(default[0], tuple):
                value = tuple(tuple(int(v) for v in row) for row in value)
            elif isinstance(default, tuple):
                value = tuple(int(v) for v in value)
            elif isinstance(default, bool):
                value = bool(value)
            elif isinstance(default, int):
                if isinstance(value, float) and not value.is_integer():
                    raise ValueError(value)
                value = int(value)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"{section}.{field.name}: bad value {value!r}") from err
        values[field.name] = value
    return cls(**values)


def read_config(folder: str | Path) -> SpeechTokenizer25HzConfig:
    """The speech tokenizer folder's config.json, as a 25 Hz decoder config."""
    path = Path(folder) / "config.json"
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ConfigError(f"{path}: no such file") from err
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON ({err})") from err
    try:
        return SpeechTokenizer25HzConfig.from_dict(raw)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from err
