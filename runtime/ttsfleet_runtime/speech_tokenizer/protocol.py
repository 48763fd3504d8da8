"""FrameDecoder: the one protocol the codec worker drives, whatever the speech
tokenizer's rate, and the frame timing that goes with it. The adapters that make each
rate's decoder one live in engine/frame_decoder.py.

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
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from ..model.prompt import VoicePrompt


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
