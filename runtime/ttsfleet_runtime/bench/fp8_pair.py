"""fp8 and bf16 weights side by side, as the benchmarks that compare them load and step
them (bench/fp8_drift.py: drift and speed; bench/fp8_kernel.py: the products and the
step): one checkpoint loaded each way with a runner that steps it as the engine does,
and the decode step timed."""

from __future__ import annotations

import dataclasses
import statistics

import torch

from .common import timed

WAYS = ("bf16", "fp8")


def prepare_device(device: str, refuse) -> None:
    """The process set up as the server runs on `device`; `refuse(message)` (argparse's
    `error`) when it asks for a GPU this machine does not have."""
    if device == "cuda" and not torch.cuda.is_available():
        refuse("no CUDA device: use --device cpu")
    if device == "cuda":
        from ttsfleet_runtime.engine import process_switches

        process_switches.set_for_serving(device)
    else:
        # Tiny models: more intra-op threads only wait on each other (tests/engine/conftest.py).
        torch.set_num_threads(1)


@dataclasses.dataclass
class Side:
    """One way (bf16 or fp8): the model and the runner that steps it as the engine does."""

    model: object
    runner: object


def load_side(ckpt: str, weights: str, args) -> Side:
    from ttsfleet_runtime.engine.kv_blocks import blocks_for
    from ttsfleet_runtime.engine.model_runner import ModelRunner
    from ttsfleet_runtime.model import ops as talker_ops
    from ttsfleet_runtime.model.weights import load_model

    graphs = args.device == "cuda"
    model = load_model(
        ckpt,
        args.device,
        args.dtype,
        max_positions=args.max_len,
        ops=talker_ops.for_device(args.device, graphs),
        weights=weights,
        progress=lambda m: args.budget.log(f"  {weights}: {m}"),
    )
    rows = max(args.seeds, *args.batch_sizes)
    runner = ModelRunner(
        model,
        max_batch=rows,
        max_len=args.max_len,
        max_text=256,
        device=args.device,
        cuda_graphs=graphs,
        kv_blocks=rows * blocks_for(args.max_len, 64),
    )
    return Side(model, runner)


def slot_params(seed: int, frames: int, greedy: bool):
    from ttsfleet_runtime.engine.api import SamplingParams
    from ttsfleet_runtime.engine.prefill_rows import SlotParams

    names = {f.name for f in dataclasses.fields(SlotParams)}
    params = {k: v for k, v in dataclasses.asdict(SamplingParams()).items() if k in names}
    if greedy:
        params |= dict(temperature=0.0, subtalker_temperature=0.0)
    # min_frames past the run: EOS is never sampled, every stream runs `frames` frames.
    return SlotParams(**(params | dict(seed=seed, min_frames=frames + 1)))


@torch.inference_mode()
def step_ms(side: Side, B: int, args) -> dict:
    """The decode step at batch B over rows holding `--kv-len` positions, as
    bench/profile_step.py times it: graph replays on a GPU, eager steps on the CPU."""
    from ttsfleet_runtime.bench.engine import spread_kv_blocks

    runner = side.runner
    B = runner.bucket(B)
    for slot in range(B):
        runner.set_sampling(slot, slot_params(slot, 0, greedy=False))
    spread_kv_blocks(runner, B, args.kv_len + 1)
    s = runner.state
    s.position[:B] = args.kv_len
    s.hidden[:B].normal_()
    s.code0[:B] = torch.randint(0, 2048, (B,), device=s.code0.device)
    s.active.zero_()  # nothing advances: every replay sees the same state
    if runner.use_graphs:
        graph = runner.graphs.get(B) or runner.capture(B)
        for _ in range(5):
            graph.replay()
        samples = timed(graph.replay, args.replays)
        how = "cuda graph replay"
    else:
        runner.step(B, runner.max_len)
        samples = timed(lambda: runner.step(B, runner.max_len), max(3, args.replays // 20))
        how = "eager step"
    return dict(
        batch=B, kv_len=args.kv_len, how=how, ms=statistics.median(samples), samples_ms=samples
    )
