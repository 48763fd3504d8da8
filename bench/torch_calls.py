"""How many torch calls the engine thread makes per iteration, by phase.

Why count calls, not time: on the H100 the serving process is bound by the
interpreter lock. Every torch call from Python releases the GIL around its
dispatch and takes it back, and taking it back can wait up to the 5 ms switch
interval while the codec thread or the HTTP loop runs Python. So the engine
thread's host-side bookkeeping costs in calls, whatever each call does.

The engine runs the tiny random CustomVoice checkpoint on the CPU with
`--streams` concurrent requests of random lengths, each replaced by a new one
when it ends (arrivals every iteration, as under load). On the engine thread a
`TorchFunctionMode` counts every torch function and Tensor method called from
Python (attribute reads such as `.shape` are not counted: they do not
dispatch), attributed to the innermost engine phase it runs in:

    release       EngineCore._release_finished (ModelRunner.release, KV blocks back)
    plan          what _admit and _iteration do themselves (scheduler, under the lock)
    take_text     EngineCore._take_texts (ModelRunner.set_texts)
    block_tables  EngineCore._sync_block_tables
    prompt        EngineCore._prompt (PromptBuilder.prefill_embeds)
    prefill       the rest of EngineCore._prefill (ModelRunner.prefill)
    launch        EngineCore._launch_isolating (ModelRunner.launch_decode)
    complete      EngineCore._complete (codes to the host, chunks to the codec)

The decode step (`ModelRunner._step`) and the packed prefill's step
(`_prefill_step`) are one CUDA graph replay each on the GPU: they count as one
call here, whatever they run eagerly on the CPU.

Host -> device copies take the GPU's path: `to_device` and `array_to_device`
are replaced, in every module that imported them, by ones that run the same
`PinnedStaging` copies the GPU runs (an unpinned buffer, events that count
their calls), so their calls are counted as the GPU makes them. Left out: the pinned copy of each step's
codes and its event (`StepOutput`, ~4 calls a step), which only CUDA makes.

    PYTHONPATH=runtime python3 bench/torch_calls.py --streams 24 --iterations 300
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import random
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint
from ttsfleet_runtime.engine.api import SamplingParams, SynthesisRequest
from ttsfleet_runtime.engine.tts_engine import TTSEngine
from ttsfleet_runtime.kernels import host_copy

# Engine methods whose torch calls make a phase (innermost wins).
PHASES = {
    "_release_finished": "release",
    "_admit": "plan",
    "_take_texts": "take_text",
    "_sync_block_tables": "block_tables",
    "_prompt": "prompt",
    "_prefill": "prefill",
    "_launch_isolating": "launch",
    "_complete": "complete",
}
# Runner methods that are one graph replay on the GPU.
GRAPHS = ("_step", "_prefill_step")


class CallCounter(TorchFunctionMode):
    """Counts torch calls by phase and by function, on the thread that enters it."""

    def __init__(self):
        super().__init__()
        self.phase = ["plan"]
        self.in_graph = False
        self.measuring = False  # within the iterations counted
        self.thread: int | None = None  # the engine thread (events come from others too)
        self.calls: collections.Counter[str] = collections.Counter()
        self.by_function: dict[str, collections.Counter[str]] = collections.defaultdict(
            collections.Counter
        )

    def count(self, name: str) -> None:
        if self.in_graph or threading.get_ident() != self.thread:
            return
        phase = self.phase[-1]
        self.calls[phase] += 1
        self.by_function[phase][name] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__qualname__", None) or repr(func)
        if not name.endswith("__get__"):  # attribute reads: no dispatch
            self.count(name)
        return func(*args, **(kwargs or {}))


class CountedEvent:
    """A CUDA event's calls (record, synchronize), counted instead of made."""

    counter: CallCounter | None = None

    def record(self) -> None:
        if self.counter is not None:
            self.counter.count("Event.record")

    def synchronize(self) -> None:
        if self.counter is not None:
            self.counter.count("Event.synchronize")


def gpu_copy_path(counter: CallCounter) -> None:
    """Make every module's `to_device` and `array_to_device` take the CUDA path's
    calls on the CPU: the bodies of kernels/host_copy.py's, less the device test."""
    CountedEvent.counter = counter
    staging = threading.local()

    def ring() -> host_copy.PinnedStaging:
        if getattr(staging, "ring", None) is None:
            staging.ring = host_copy.PinnedStaging(pin=False, event=CountedEvent)
        return staging.ring

    def to_device(host, device, out=None):
        device = host_copy._device(device)
        staged = ring().copy(host, device, out)
        if staged is not None:
            return staged
        pinned = host.clone()  # stands in for host.pin_memory(): one call
        return pinned.to(device) if out is None else out.copy_(pinned)

    def array_to_device(array, device, out=None):
        device = host_copy._device(device)
        staged = ring().copy_array(array, device, out)
        if staged is not None:
            return staged
        return to_device(torch.from_numpy(np.ascontiguousarray(array)), device, out)

    emulations = {"to_device": to_device, "array_to_device": array_to_device}
    originals = {name: getattr(host_copy, name) for name in emulations}
    for module in list(sys.modules.values()):
        for name, emulation in emulations.items():
            if getattr(module, name, None) is originals[name]:
                setattr(module, name, emulation)


def instrument(engine: TTSEngine, counter: CallCounter, skip: int, iterations: int) -> dict:
    """Wrap the engine thread's methods; returns the tally the wrappers fill."""
    core, runner = engine.core, engine.runner
    tally = collections.Counter()
    done = threading.Event()

    def phase(method, label):
        def wrapped(*args, **kwargs):
            counter.phase.append(label)
            try:
                return method(*args, **kwargs)
            finally:
                counter.phase.pop()

        return wrapped

    for name, label in PHASES.items():
        setattr(core, name, phase(getattr(core, name), label))

    def graph(method):
        def wrapped(*args, **kwargs):
            counter.count("graph.replay")
            counter.in_graph = True
            try:
                return method(*args, **kwargs)
            finally:
                counter.in_graph = False

        return wrapped

    for name in GRAPHS:
        setattr(runner, name, graph(getattr(runner, name)))

    def events(obj, name, key, size=lambda *a, **k: 1):
        method = getattr(obj, name)

        def wrapped(*args, **kwargs):
            if counter.measuring:
                tally[key] += size(*args, **kwargs)
            return method(*args, **kwargs)

        setattr(obj, name, wrapped)

    events(runner, "prefill", "prompts", lambda prompts: len(prompts))
    events(runner, "prefill", "prefill_calls")
    events(runner, "set_texts", "set_text_slots", lambda texts: len(texts))
    events(runner, "release", "released_slots", lambda *slots: len(slots))
    events(runner, "launch_decode", "steps")

    iteration = core._iteration
    seen = [0]

    def counted_iteration():
        seen[0] += 1
        measuring = skip < seen[0] <= skip + iterations
        counter.measuring = measuring
        if not measuring:
            if seen[0] > skip + iterations:
                done.set()
            return iteration()
        tally["iterations"] += 1
        counter.thread = threading.get_ident()
        before = sum(counter.calls.values())
        with counter:
            did_work = iteration()
        tally["idle_iterations"] += sum(counter.calls.values()) == before
        return did_work

    core._iteration = counted_iteration
    tally_holder = {"tally": tally, "done": done}
    return tally_holder


async def load(engine: TTSEngine, streams: int, frames: tuple[int, int], done, seed: int):
    """`streams` requests at all times, each of random length, replaced as it ends."""
    rng = random.Random(seed)
    texts = [
        "Hello there, how are you today?",
        "A short one.",
        "The quick brown fox jumps over the lazy dog, twice.",
    ]

    async def client(i: int):
        n = 0
        while not done.is_set():
            length = rng.randint(*frames)
            request = SynthesisRequest(
                text=texts[(i + n) % len(texts)],
                voice="ryan" if (i + n) % 2 else "vivian",
                language="english",
                params=SamplingParams(seed=1000 * i + n, max_frames=length, min_frames=length),
            )
            n += 1
            async for _ in engine.submit(request):
                pass

    tasks = [asyncio.create_task(client(i)) for i in range(streams)]
    while not done.is_set():
        await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def measure(args) -> dict:
    torch.set_num_threads(1)
    checkpoint = args.model
    if checkpoint is None:
        checkpoint = write_random_checkpoint(
            Path(tempfile.mkdtemp(prefix="torch-calls-")), "tiny", "CustomVoice", seed=3
        )
    engine = TTSEngine.from_pretrained(
        str(checkpoint), "cpu", dtype="float32", max_batch=args.max_batch
    )
    counter = CallCounter()
    await engine.start()
    gpu_copy_path(counter)
    holder = instrument(engine, counter, args.skip, args.iterations)
    try:
        await load(engine, args.streams, (args.min_frames, args.max_frames), holder["done"], 7)
    finally:
        await engine.stop(drain_timeout_s=0)
    return report(counter, holder["tally"], args.top)


def report(counter: CallCounter, tally: collections.Counter, top: int) -> dict:
    iterations = tally["iterations"]
    phases = sorted(counter.calls, key=lambda p: -counter.calls[p])
    out = {
        "events": dict(tally),
        "per_iteration": {p: round(counter.calls[p] / iterations, 2) for p in phases},
        "total_per_iteration": round(sum(counter.calls.values()) / iterations, 2),
        "per_event": {
            "release per released slot": _ratio(counter.calls["release"], tally["released_slots"]),
            "prompt per prompt": _ratio(counter.calls["prompt"], tally["prompts"]),
            "prefill per prompt": _ratio(counter.calls["prefill"], tally["prompts"]),
            "prefill per call": _ratio(counter.calls["prefill"], tally["prefill_calls"]),
            "take_text per set_text slot": _ratio(
                counter.calls["take_text"], tally["set_text_slots"]
            ),
            "launch per step": _ratio(counter.calls["launch"], tally["steps"]),
            "complete per step": _ratio(counter.calls["complete"], tally["steps"]),
        },
        "top": {p: counter.by_function[p].most_common(top) for p in phases},
    }
    return out


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 2) if b else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a checkpoint (default: the tiny random one)")
    p.add_argument("--streams", type=int, default=24, help="concurrent requests")
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--min-frames", type=int, default=8)
    p.add_argument("--max-frames", type=int, default=24)
    p.add_argument("--skip", type=int, default=40, help="iterations before counting")
    p.add_argument("--iterations", type=int, default=300, help="iterations counted")
    p.add_argument("--top", type=int, default=8, help="functions listed per phase")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args()
    out = asyncio.run(measure(args))
    text = json.dumps(out, indent=1)
    if args.json:
        args.json.write_text(text)
    print(f"iterations counted: {out['events'].get('iterations')}  events: {out['events']}")
    print(f"torch calls per iteration: {out['total_per_iteration']}")
    for phase, n in out["per_iteration"].items():
        print(f"  {phase:13s} {n:8.2f}")
    print("per event:")
    for what, n in out["per_event"].items():
        print(f"  {what:30s} {n}")
    print("top functions per phase (calls over all counted iterations):")
    for phase, rows in out["top"].items():
        print(f"  {phase}: " + ", ".join(f"{name} {n}" for name, n in rows))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
