"""FrameDecoder: the one protocol the codec worker drives, whatever the speech
tokenizer's rate, and the frame timing that goes with it.

A checkpoint's speech tokenizer fixes how much audio one talker frame is: the 12 Hz
tokenizer's causal Mimi-style decoder makes 1,920 samples (at 24 kHz: 12.5 frames a
second) of every frame at once; the 25 Hz tokenizer's block-wise DiT and BigVGAN
make 960 a code, but only once the look-ahead of its blocks has arrived. The engine
never assumes either: `FrameTiming` (read from the checkpoint) is the one home of
the rate, and the worker sees only this protocol:

    slot = decoder.open(voice)              # a stream; voice: its conditioning or None
    audio = decoder.decode(slots, codes)    # host codes [B, n, groups] -> what is final now
    audio = decoder.finish(slots)           # end of utterance: the rest; closes the slots
    decoder.close(slot)                     # cancel: drop the stream, no audio

`decode` takes the codes on the host and moves them where the decoder reads them (the
12 Hz codec on the device, without blocking; the 25 Hz decoder plans its windows from
them on the host, so they never make a round trip). `decode` and `finish` return the
streams' audio back to back in one device tensor (`DecodedAudio`), with each stream's
length known on the host: the worker brings a whole batch to the host in one copy, as it
did when the 12 Hz codec was all there was.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Protocol

import torch

from ..kernels.host_copy import to_device
from ..model.config import TTSConfig
from ..model.prompt import VoicePrompt
from ..speech_tokenizer.rate12.config import SpeechTokenizerConfig
from ..speech_tokenizer.rate12.convs import EAGER as EAGER_CONVS
from ..speech_tokenizer.rate12.convs import ConvRoute
from ..speech_tokenizer.rate12.streaming import StreamingCodec
from ..speech_tokenizer.rate25 import DecoderVoice, StreamingDecoder25Hz, read_config


@dataclasses.dataclass(frozen=True)
class FrameTiming:
    """How much audio one talker frame (one position of the talker) is, and in
    steps of how many frames a decoder makes it: the 25 Hz DiT's block (12 codes),
    or 1 where every frame's audio comes out on its own (12 Hz). Chunks are whole
    steps (`chunk_frames`): a chunk between two would decode nothing new."""

    sample_rate: int
    samples_per_frame: int
    emission_frames: int = 1

    @property
    def frame_rate_hz(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    def frame_s(self) -> float:
        return self.samples_per_frame / self.sample_rate

    def frames_for(self, seconds: float) -> int:
        """Frames that make `seconds` of audio (rounded to the nearest)."""
        return round(seconds * self.frame_rate_hz)

    def chunk_frames(self, frames: int) -> int:
        """`frames` rounded up to whole emission steps."""
        step = self.emission_frames
        return -(-frames // step) * step


@dataclasses.dataclass(frozen=True)
class DecodedAudio:
    """Audio of a batch of streams: `samples` (1-D, on the decoder's device) holds
    each stream's in the order of the call's slots, `lengths[i]` samples of the i-th."""

    samples: torch.Tensor
    lengths: tuple[int, ...]


class FrameDecoder(Protocol):
    timing: FrameTiming
    code_groups: int  # codes per frame: 16 at 12 Hz, 1 at 25 Hz
    # Padding a chunk's end with extra frames changes no sample of the real ones
    # (causal decoders): a short last chunk may replay a captured graph.
    causal: bool

    def open(self, voice: VoicePrompt) -> int: ...

    def decode(self, slots: list[int], codes: torch.Tensor) -> DecodedAudio: ...

    def finish(self, slots: list[int]) -> DecodedAudio: ...

    def close(self, slot: int) -> None: ...

    @property
    def active(self) -> int: ...

    @property
    def state_bytes_per_stream(self) -> int: ...

    def capture(self, batch_sizes: list[int], frame_counts: list[int]) -> None: ...

    def has_graph(self, batch: int, frames: int) -> bool: ...


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
    12 Hz decoder's convolutions on `conv_route` (codec/convs.py)."""
    from ..speech_tokenizer.rate12.decoder import load_speech_tokenizer
    from ..speech_tokenizer.rate25 import load_speech_tokenizer_25hz

    folder = checkpoint / "speech_tokenizer"
    timing = read_timing(checkpoint)
    if tokenizer_rate_hz(checkpoint) == 25:
        decoder_25hz = load_speech_tokenizer_25hz(folder, device, dtype)
        return Codec25Hz(StreamingDecoder25Hz(decoder_25hz, max_streams, device), timing)
    decoder = load_speech_tokenizer(folder, device, dtype, conv_route)
    return Codec12Hz(StreamingCodec(decoder, max_streams, device), timing)
