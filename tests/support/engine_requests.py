"""Shared request helpers for the engine tests."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest

PROSE = (
    "The morning was cold and clear. She walked to the station, counting the steps as she went; "
    "the train was late again! Would it come at all? Nobody on the platform seemed to know. "
    "One, two, three, four, five: the numbers kept her calm while the wind picked up. "
)


def says_eos_after_two_frames(engine) -> None:
    """Random weights never say EOS; bias the talker's EOS logit so that every
    piece ends as soon as the minimum length (2 frames) allows."""
    talker = engine.model.talker
    bias = torch.zeros(talker.codec_head.shape[0])
    bias[engine.model.config.talker.codec_eos_token_id] = 1e4
    talker.logits = lambda hidden: F.linear(hidden, talker.codec_head) + bias


def fixed_length(frames: int, seed: int, **kw) -> SamplingParams:
    """Sampling (not greedy) with EOS suppressed: exactly `frames` frames."""
    return SamplingParams(seed=seed, max_frames=frames, min_frames=frames, **kw)


def request(
    text: str = "Hello there, how are you today?",
    voice: str = "ryan",
    request_id: str = "",
    sample_format: str = "f32",
    **params,
) -> SynthesisRequest:
    return SynthesisRequest(
        text=text,
        voice=voice,
        language="english",
        params=fixed_length(**params),
        request_id=request_id,
        sample_format=sample_format,
    )


async def collect(stream) -> tuple[list, np.ndarray]:
    chunks = [c async for c in stream]
    pcm = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
    return chunks, pcm


def codes_of(stream) -> np.ndarray:
    return np.stack(stream.seq.all_codes)


def record_codec_calls(engine) -> list[int]:
    """The frame counts of the engine's codec decode calls from now on, in order."""
    calls: list[int] = []
    decode = engine.codec.decode

    def recording_decode(slots, codes):
        calls.append(codes.shape[1])
        return decode(slots, codes)

    engine.codec.decode = recording_decode
    return calls
