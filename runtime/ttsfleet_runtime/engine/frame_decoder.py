"""The engine's side of the speech tokenizers: the adapters that make the 12 Hz codec
and the 25 Hz decoder `FrameDecoder`s (speech_tokenizer/protocol.py), the checkpoint's
frame timing (`read_timing`: the one place it is made) and the loader that picks the
decoder by the checkpoint's rate.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..model.config import TTSConfig
from ..model.prompt import VoicePrompt
from ..speech_tokenizer.protocol import DecodedAudio, FrameDecoder, FrameTiming
from ..speech_tokenizer.rate12.config import SpeechTokenizerConfig
from ..speech_tokenizer.rate12.convs import EAGER as EAGER_CONVS
from ..speech_tokenizer.rate12.convs import ConvRoute
from ..speech_tokenizer.rate12.streaming import StreamingCodec
from ..speech_tokenizer.rate25 import DecoderVoice, StreamingDecoder25Hz, read_config
from ..transfers import to_device


class Codec12Hz:
    """The 12 Hz `StreamingCodec` as a FrameDecoder. Its decode gives every stream
    `n * 1920` samples, so the batch's [B, n*1920] output is already the streams back
    to back: a view, no copy. Its streams need no conditioning and hold nothing back
    at the end of an utterance."""

    causal = True

    def __init__(self, codec: StreamingCodec, timing: FrameTiming):
        self.codec = codec
        self.timing = timing  # read_timing's, from the same folder
        self.code_groups = codec.num_quantizers

    def open(self, voice: VoicePrompt) -> int:
        return self.codec.open()

    def decode(self, slots: list[int], codes: torch.Tensor) -> DecodedAudio:
        pcm = self.codec.decode(slots, to_device(codes, self.codec.device))
        return DecodedAudio(pcm.reshape(-1), (pcm.shape[1],) * pcm.shape[0])

    def finish(self, slots: list[int]) -> DecodedAudio:
        for slot in slots:
            self.codec.close(slot)
        return DecodedAudio(torch.empty(0), (0,) * len(slots))

    def close(self, slot: int) -> None:
        self.codec.close(slot)

    @property
    def active(self) -> int:
        return self.codec.active

    @property
    def state_bytes_per_stream(self) -> int:
        return self.codec.state_bytes_per_stream

    def capture(self, batch_sizes: list[int], frame_counts: list[int]) -> None:
        self.codec.capture(batch_sizes, frame_counts)

    def has_graph(self, batch: int, frames: int) -> bool:
        return self.codec.has_graph(batch, frames)


class Codec25Hz:
    """The 25 Hz `StreamingDecoder25Hz` as a FrameDecoder: one code a frame, audio
    by DiT blocks once the next block's codes are in, the last blocks at `finish`.
    A cloned voice conditions it (its x-vector and reference mel); a built-in
    speaker does not (None: the DiT's unconditioned input)."""

    causal = False
    code_groups = 1

    def __init__(self, decoder: StreamingDecoder25Hz, timing: FrameTiming):
        self.decoder = decoder
        self.timing = timing  # read_timing's, from the same folder
        self._captured: set[int] = set()  # batch sizes with a graph (any frame count)

    def open(self, voice: VoicePrompt) -> int:
        conditioning = None
        if voice.decoder_xvector is not None and voice.decoder_ref_mel is not None:
            conditioning = DecoderVoice(voice.decoder_xvector, voice.decoder_ref_mel)
        return self.decoder.open(conditioning)

    def decode(self, slots: list[int], codes: torch.Tensor) -> DecodedAudio:
        return _packed(self.decoder.decode(slots, codes[:, :, 0]))

    def finish(self, slots: list[int]) -> DecodedAudio:
        return _packed(self.decoder.finish(slots))

    def close(self, slot: int) -> None:
        self.decoder.close(slot)

    @property
    def active(self) -> int:
        return self.decoder.active

    @property
    def state_bytes_per_stream(self) -> int:
        return self.decoder.state_bytes_per_stream

    def capture(self, batch_sizes: list[int], frame_counts: list[int]) -> None:
        # The DiT window's shapes depend on the batch only: one graph serves every count.
        self.decoder.capture(batch_sizes, frame_counts)
        self._captured.update(batch_sizes)

    def has_graph(self, batch: int, frames: int) -> bool:
        return batch in self._captured


def _packed(audio: list[torch.Tensor]) -> DecodedAudio:
    lengths = tuple(a.shape[0] for a in audio)
    if not any(lengths):
        return DecodedAudio(torch.empty(0), lengths)
    return DecodedAudio(torch.cat(audio), lengths)


def tokenizer_rate_hz(checkpoint: Path) -> int:
    """12 or 25: the rate of the checkpoint's speech tokenizer (its config.json)."""
    return TTSConfig.from_file(checkpoint / "config.json").tokenizer_rate_hz


def read_timing(checkpoint: Path) -> FrameTiming:
    """The frame timing of the checkpoint's speech tokenizer, from its config
    (no weights are read): the one place it is made, for the engine and its decoders."""
    folder = checkpoint / "speech_tokenizer"
    if tokenizer_rate_hz(checkpoint) == 25:
        cfg = read_config(folder)
        return FrameTiming(
            cfg.output_sample_rate, cfg.samples_per_code, cfg.mel_generator.codes_per_block
        )
    return timing_12hz(folder)


def timing_12hz(folder: Path) -> FrameTiming:
    """The frame timing of a 12 Hz `speech_tokenizer/` folder."""
    cfg = SpeechTokenizerConfig.from_dir(folder)
    return FrameTiming(cfg.output_sample_rate, cfg.decoder.samples_per_frame)


def load_frame_decoder(
    checkpoint: Path,
    device: str,
    dtype: torch.dtype,
    max_streams: int,
    conv_route: ConvRoute = EAGER_CONVS,
) -> FrameDecoder:
    """The checkpoint's speech tokenizer decoder, for `max_streams` streams at once; a
    12 Hz decoder's convolutions on `conv_route` (speech_tokenizer/rate12/convs.py)."""
    from ..speech_tokenizer.rate12.decoder import load_speech_tokenizer
    from ..speech_tokenizer.rate25 import load_speech_tokenizer_25hz

    folder = checkpoint / "speech_tokenizer"
    timing = read_timing(checkpoint)
    if tokenizer_rate_hz(checkpoint) == 25:
        decoder_25hz = load_speech_tokenizer_25hz(folder, device, dtype)
        return Codec25Hz(StreamingDecoder25Hz(decoder_25hz, max_streams, device), timing)
    decoder = load_speech_tokenizer(folder, device, dtype, conv_route)
    return Codec12Hz(StreamingCodec(decoder, max_streams, device), timing)
