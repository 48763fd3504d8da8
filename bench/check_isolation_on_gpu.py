#!/usr/bin/env python3
"""GPU check: failure isolation and long text on the CUDA-graph path.

Tiny random checkpoint, float32 graphs. (1) A decode step that fails whenever
one request's row is active ends only that request; the other two generate the
codes of a clean run (the sub-steps replay the same graphs). (2) A 4,000
character text is one stream over all its pieces (EOS forced after two frames
a piece), prefilled again piece after piece through the prefill graphs.

Usage: PYTHONPATH=runtime python3 bench/check_isolation_on_gpu.py --out DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

TEXTS = ["First bystander speaking.", "The request that fails.", "Second bystander speaking."]


async def engine_on_gpu(ckpt: str):
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    engine = TTSEngine.from_pretrained(
        ckpt, "cuda", max_batch=4, dtype="float32", max_len=512, capture_all_graphs=False
    )
    await engine.start()
    return engine


async def three(engine) -> dict:
    from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest

    streams = [
        engine.submit(
            SynthesisRequest(
                text=t,
                voice="ryan",
                language="english",
                request_id=str(i),
                params=SamplingParams(seed=i, max_frames=20, min_frames=20),
            )
        )
        for i, t in enumerate(TEXTS)
    ]
    for s in streams:
        async for _ in s:
            pass
    return {s.request_id: s for s in streams}


async def isolation(ckpt: str) -> dict:
    engine = await engine_on_gpu(ckpt)
    clean = await three(engine)
    real_launch = engine.runner.launch_decode

    def decode_failing_with_row_1(batch, active, live):
        victim = next((s for s in engine.scheduler.running.values() if s.request_id == "1"), None)
        if victim is not None and active[victim.slot] and victim.frames >= 7:
            raise RuntimeError("injected fault")
        return real_launch(batch, active, live)

    engine.runner.launch_decode = decode_failing_with_row_1
    faulty = await three(engine)
    del engine.runner.launch_decode
    await engine.stop(0)
    return {
        "victim_finish": faulty["1"].finish_reason,
        "victim_frames": faulty["1"].seq.frames,
        "bystanders_finish": [faulty[k].finish_reason for k in ("0", "2")],
        "bystander_codes_equal_clean": [
            bool(
                np.array_equal(np.stack(faulty[k].seq.all_codes), np.stack(clean[k].seq.all_codes))
            )
            for k in ("0", "2")
        ],
        "decode_graphs": sorted(engine.runner.graphs),
    }


async def long_text(ckpt: str) -> dict:
    from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
    from ttsfleet_runtime.engine.text_pieces import split_text

    engine = await engine_on_gpu(ckpt)
    talker = engine.model.talker
    bias = torch.zeros(talker.codec_head.shape[0], device="cuda")
    bias[engine.model.config.talker.codec_eos_token_id] = 1e4
    talker.logits = lambda hidden: F.linear(hidden, talker.codec_head) + bias  # before any capture
    text = (
        "The morning was cold and clear. She walked to the station, counting the steps; "
        "the train was late again! Would it come at all? "
    ) * 40
    text = text[:4000]
    pieces = split_text(text, lambda t: len(engine.builder.text_ids(t)), engine.piece_tokens)
    stream = engine.submit(SynthesisRequest(text=text, voice="ryan", params=SamplingParams(seed=5)))
    chunks = [c async for c in stream]
    await engine.stop(0)
    return {
        "pieces": len(pieces),
        "finish": stream.finish_reason,
        "pieces_spoken": stream.seq.piece + 1,
        "frames": sum(c.frames for c in chunks),
        "chunk_indexes_continuous": [c.index for c in chunks] == list(range(len(chunks))),
    }


async def main(out: str) -> None:
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    ckpt = str(write_random_checkpoint(tempfile.mkdtemp(), "tiny", "CustomVoice", seed=3))
    result = {"isolation": await isolation(ckpt), "long_text": await long_text(ckpt)}
    print(json.dumps(result, indent=1, default=str))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "isolation_on_gpu.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=".")
    asyncio.run(main(parser.parse_args().out))
