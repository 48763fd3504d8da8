"""An engine serving fp8 weights (`--weights fp8`) on the CPU: the decoder layers'
matrices quantized at load, their product computed in torch (Fp8Weight.matmul), the rest
of the engine as with bf16."""

from __future__ import annotations

import numpy as np

from support.engine_requests import codes_of, collect, request
from ttsfleet_runtime.model.fp8 import Fp8Weight


async def test_an_fp8_engine_synthesises_a_whole_utterance(make_engine):
    engine = await make_engine(max_batch=2, weights="fp8")
    assert isinstance(engine.model.talker.stack.layers[0].down, Fp8Weight)
    assert engine.model.weights == "fp8"
    stream = engine.submit(request(frames=6, seed=2))
    chunks, pcm = await collect(stream)
    assert stream.finish_reason == "length"
    assert sum(c.frames for c in chunks) == 6 and codes_of(stream).shape[0] == 6
    assert pcm.size == 6 * engine.info.samples_per_frame and np.isfinite(pcm).all()
