"""Shared request helpers for the engine tests."""

from __future__ import annotations

import numpy as np

from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest


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
