"""Band-limited resampling of a mono recording, torch-free.

libsoxr at its high quality is what qwen-tts 0.1.1 resamples reference audio with
(`librosa.resample`'s default is soxr "HQ"), so a recording resampled here reaches the
voice encoders as it reaches the reference's.
"""

from __future__ import annotations

import numpy as np


def resample(mono: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """float32 [n] at `from_rate` -> float32 at `to_rate` (unchanged when they are equal)."""
    if from_rate == to_rate:
        return mono.astype(np.float32, copy=False)
    import soxr

    return soxr.resample(mono, from_rate, to_rate, quality="HQ").astype(np.float32, copy=False)
