"""The engine thread prepares the next iteration while the device runs a decode
step: a newcomer that arrives while a step is being launched is prefilled before
that step's codes are read; one that arrives while they are waited for is
prefilled right after. Either way it joins the very next step, and what every
stream makes is what it makes alone."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from support.engine_requests import codes_of, collect, request


class DeviceCalls:
    """Records the engine's device calls in order: ('launch', rows) and ('result',
    rows) of each decode step, ('prefill', prompts) of each packed prefill. `hold(call)`
    makes the next such call of a step over one row wait, on the engine thread, until
    `release()`: the test's newcomer then arrives at a known point of the loop."""

    def __init__(self, engine, monkeypatch):
        runner, self.calls = engine.runner, []
        self._held: str | None = None
        self._reached = threading.Event()
        self._go = threading.Event()
        real_launch, real_prefill = runner.launch_decode, runner.prefill

        def launch_decode(batch, active, live_len):
            output = real_launch(batch, active, live_len)
            rows = sum(active)
            self._pause("launch", rows)
            self.calls.append(("launch", rows))
            real_result = output.result

            def result():
                self._pause("result", rows)
                self.calls.append(("result", rows))
                return real_result()

            output.result = result
            return output

        def prefill(prompts):
            self.calls.append(("prefill", len(prompts)))
            return real_prefill(prompts)

        monkeypatch.setattr(runner, "launch_decode", launch_decode)
        monkeypatch.setattr(runner, "prefill", prefill)

    def _pause(self, call: str, rows: int) -> None:
        if self._held == call and rows == 1:
            self._held = None
            self._reached.set()
            assert self._go.wait(timeout=60), "the test never released the engine"

    async def hold(self, call: str) -> None:
        """Stop the engine thread at the next `call` of a one-row step; returns once it is there."""
        self._reached.clear()
        self._go.clear()
        self._held = call
        while not self._reached.is_set():
            await asyncio.sleep(0.001)

    def release(self) -> None:
        self._go.set()


@pytest.mark.parametrize(
    ("arrives_during", "order"),
    [
        # Prefilled while the running stream's step is on the device.
        ("launch", [("launch", 1), ("prefill", 1), ("result", 1), ("launch", 2)]),
        # Arrived while the engine waited for the step: prefilled before the next launch.
        ("result", [("launch", 1), ("result", 1), ("prefill", 1), ("launch", 2)]),
    ],
)
async def test_a_newcomer_joins_the_next_step(make_engine, monkeypatch, arrives_during, order):
    engine = await make_engine(max_batch=4)
    alone = {}
    for seed, frames in ((1, 24), (2, 8)):
        stream = engine.submit(request(frames=frames, seed=seed))
        await collect(stream)
        alone[seed] = codes_of(stream)
    device = DeviceCalls(engine, monkeypatch)

    first = engine.submit(request(frames=24, seed=1))
    chunks = first.__aiter__()
    await chunks.__anext__()  # it is running: its steps follow each other
    await device.hold(arrives_during)
    second = engine.submit(request(frames=8, seed=2))
    device.release()
    await collect(second)
    async for _ in chunks:
        pass

    calls = device.calls
    newcomer = [i for i, call in enumerate(calls) if call[0] == "prefill"][
        1
    ]  # the first's, then its
    at = newcomer - order.index(("prefill", 1))
    assert calls[at : at + len(order)] == order, calls
    # Every step launched was read once, in launch order.
    launched = [n for call, n in calls if call == "launch"]
    assert launched == [n for call, n in calls if call == "result"]
    np.testing.assert_array_equal(codes_of(first), alone[1])
    np.testing.assert_array_equal(codes_of(second), alone[2])
    assert first.finish_reason == second.finish_reason == "length"
