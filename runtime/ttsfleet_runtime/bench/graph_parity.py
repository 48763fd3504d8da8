"""GPU check: the CUDA-graph decode path generates what the eager CPU path does.

Tiny random checkpoint, seeded sampling (not greedy), 3 requests batched
together: float32 graphs on the GPU must give the CPU's codes exactly; bfloat16
graphs must agree on most codes (bf16 rounding may flip near-ties).

Run by `ttsfleet-runtime bench --parity` before the timings (same process: compiled
kernels are shared), or alone: `python -m ttsfleet_runtime.bench.graph_parity --out DIR`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile

import numpy as np


async def codes(ckpt: str, device: str, dtype: str, graphs: bool) -> list[np.ndarray]:
    from ttsfleet_runtime.engine import process_switches
    from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
    from ttsfleet_runtime.engine.tts_engine import TTSEngine

    process_switches.set_for_serving(device)
    engine = TTSEngine.from_pretrained(
        ckpt,
        device,
        max_batch=4,
        dtype=dtype,
        cuda_graphs=graphs,
        max_len=512,
        capture_all_graphs=False,
        # Every frame's codes stay on the sequence: what this check compares.
        keep_codes=True,
    )
    await engine.start()
    texts = ["Hello there, how are you?", "A second, slightly longer sentence to speak.", "Third."]
    streams = [
        engine.submit(
            SynthesisRequest(
                text=t,
                voice="ryan",
                language="english",
                params=SamplingParams(seed=i, max_frames=24, min_frames=24),
            )
        )
        for i, t in enumerate(texts)
    ]
    for s in streams:
        async for _ in s:
            pass
    await engine.stop(0)
    return [np.stack(s.seq.all_codes) for s in streams]


async def main(out: str) -> None:
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

    ckpt = write_random_checkpoint(tempfile.mkdtemp(), "tiny", "CustomVoice", seed=7)
    cpu = await codes(str(ckpt), "cpu", "float32", False)
    gpu32 = await codes(str(ckpt), "cuda", "float32", True)
    gpu16 = await codes(str(ckpt), "cuda", "bfloat16", True)
    result = dict(
        float32_graphs_equal_cpu=all(np.array_equal(a, b) for a, b in zip(cpu, gpu32, strict=True)),
        float32_code_agreement=float(
            np.mean([np.mean(a == b) for a, b in zip(cpu, gpu32, strict=True)])
        ),
        bfloat16_code_agreement=float(
            np.mean([np.mean(a == b) for a, b in zip(cpu, gpu16, strict=True)])
        ),
        bfloat16_first_frame_equal=all(
            np.array_equal(a[0], b[0]) for a, b in zip(cpu, gpu16, strict=True)
        ),
    )
    print(json.dumps(result, indent=1))
    with open(os.path.join(out, "graph_parity.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    asyncio.run(main(ap.parse_args().out))
