"""The 12 Hz speech tokenizer's decoder (codes -> 24 kHz audio), offline and streaming."""

from .decoder import CodecDecoder, load_speech_tokenizer
from .streaming import StreamingCodec

__all__ = ["CodecDecoder", "StreamingCodec", "load_speech_tokenizer"]
