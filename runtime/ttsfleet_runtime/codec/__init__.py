"""The 12 Hz speech tokenizer's decoder (codes -> 24 kHz audio), offline and streaming."""

from .decoder import CodecDecoder, load_speech_tokenizer

__all__ = ["CodecDecoder", "load_speech_tokenizer"]
