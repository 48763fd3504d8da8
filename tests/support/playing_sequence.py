"""A stand-in for one running engine sequence, holding only what the engine core's
lead sampling (`EngineCore._sample_leads`) reads: tests put streams at a chosen point
of playback into `core.scheduler.running` without a model generating them. One class
for every frame rate, so a field the sampling starts to read is added here once."""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(eq=False)  # by identity, as the scheduler keeps sequences
class PlayingSequence:
    stream: Any  # the codec side: first_audio_at, audio_delivered_s, frames_decoded
    frames: int  # generated
    pending: list  # generated, not yet handed to the codec
    chunks: int = 5  # handed to the codec so far (5: past the 12 Hz ramp, chunks of 8)
    finished: bool = False
    paused: bool = False  # its caller is a buffer behind (backpressure)
    background: bool = False  # batch work (SynthesisRequest.priority "batch"): no listener
