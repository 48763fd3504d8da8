"""The 12 Hz speech tokenizer: its decoder (codes -> 24 kHz audio, offline and streaming)
and its encoder (a reference recording -> codes, for voice cloning)."""

from .decoder import CodecDecoder, load_speech_tokenizer
from .encoder import CodecEncoder, load_codec_encoder
from .streaming import StreamingCodec

__all__ = [
    "CodecDecoder",
    "CodecEncoder",
    "StreamingCodec",
    "load_codec_encoder",
    "load_speech_tokenizer",
]
