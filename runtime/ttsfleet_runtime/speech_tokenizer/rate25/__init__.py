"""The 25 Hz speech tokenizer's decoder (codes -> 24 kHz audio, offline and streaming):
a block-wise DiT that generates mel frames by flow matching, and a BigVGAN vocoder."""

from .config import ConfigError, SpeechTokenizer25HzConfig, read_config
from .decoder import (
    CheckpointMismatch,
    Decoder25Hz,
    DecoderVoice,
    load_speech_tokenizer_25hz,
)
from .streaming import StreamingDecoder25Hz

__all__ = [
    "CheckpointMismatch",
    "ConfigError",
    "Decoder25Hz",
    "DecoderVoice",
    "SpeechTokenizer25HzConfig",
    "StreamingDecoder25Hz",
    "load_speech_tokenizer_25hz",
    "read_config",
]
