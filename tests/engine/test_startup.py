"""Start-up: the phases a start goes through add up to the time from process start
to ready, a warm-up synthesis runs through the real path before ready with a
chunk of every size the ramp makes, using only the graphs captured before ready
(the smallest buckets), and the graphs the start leaves out are captured later,
the largest first, then small buckets first, with every step replaying a graph
that holds it or capturing its own meanwhile."""

from __future__ import annotations

import time

import pytest
import torch

from ttsfleet_runtime import metrics
from ttsfleet_runtime.engine.graph_capture import (
    BATCH_BUCKETS,
    buckets_after_ready,
    buckets_before_ready,
    capture_order,
)
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.engine.scheduler import StepRules
from ttsfleet_runtime.engine.startup import StartupClock, process_start_time
from ttsfleet_runtime.engine.tts_engine import TTSEngine
from ttsfleet_runtime.model.weights import load_model
from ttsfleet_runtime.speech_tokenizer.rate12.streaming import StreamingCodec

IMPORTED_AT = time.time()


def test_the_process_started_before_this_test_module_was_imported():
    started = process_start_time()
    assert started is not None
    assert IMPORTED_AT - 24 * 3600 < started <= IMPORTED_AT


def test_phases_follow_each_other_and_add_up_to_the_total(caplog):
    clock = StartupClock(started_at=time.time() - 2.0)
    with caplog.at_level("INFO", logger="ttsfleet_runtime.engine.startup"):
        clock.done("import")
        time.sleep(0.05)
        clock.done("load_weights")
        total = clock.ready()
        clock.after_ready("capture_background", 3.0)
    seconds = clock.seconds
    assert list(seconds) == ["import", "load_weights", "total", "capture_background"]
    assert seconds["import"] == pytest.approx(2.0, abs=0.05)
    assert seconds["load_weights"] == pytest.approx(0.05, abs=0.04)
    assert (
        total
        == seconds["total"]
        == pytest.approx(seconds["import"] + seconds["load_weights"], abs=0.01)
    )
    lines = [r for r in caplog.records if r.message.startswith("startup: ")]
    assert [r.phase for r in lines] == list(seconds)
    assert all(r.seconds >= 0 and r.since_start_s >= r.seconds for r in lines[:2])


def test_a_phase_outside_the_catalogue_is_refused():
    with pytest.raises(ValueError, match="unknown start-up phase"):
        StartupClock().done("coffee")
    assert set(metrics.STARTUP_PHASES) >= {"import", "warm_up", "total", "capture_background"}


async def test_the_warm_up_speaks_a_chunk_of_every_ramp_size_before_ready(
    tiny_checkpoint, monkeypatch
):
    decoded = []  # frames of each codec call: the chunk sizes the warm-up went through
    codec_batches, step_batches, prefill_buckets = set(), set(), set()
    real_decode = StreamingCodec.decode
    real_step = ModelRunner.launch_decode
    real_prefill_bucket = ModelRunner._prefill_bucket

    def record(codec, slots, codes):
        decoded.append(codes.shape[1])
        codec_batches.add(len(slots))
        return real_decode(codec, slots, codes)

    def record_step(runner, batch, active, live_len):
        step_batches.add(runner.bucket(batch))
        return real_step(runner, batch, active, live_len)

    def record_prefill(runner, positions):
        bucket = real_prefill_bucket(runner, positions)
        prefill_buckets.add(bucket)
        return bucket

    monkeypatch.setattr(StreamingCodec, "decode", record)
    monkeypatch.setattr(ModelRunner, "launch_decode", record_step)
    monkeypatch.setattr(ModelRunner, "_prefill_bucket", record_prefill)
    engine = TTSEngine.from_pretrained(
        str(tiny_checkpoint), "cpu", dtype="float32", max_batch=4, chunk_frames=16, warm_up=True
    )
    submitted = []
    real_submit = engine._submit

    def watch(request):
        stream = real_submit(request)
        submitted.append((request, stream, engine.ready))
        return stream

    engine._submit = watch
    slot_seconds = engine.scheduler.mean_slot_seconds
    await engine.start()
    try:
        ((request, stream, ready_then),) = submitted
        assert not ready_then and engine.ready
        assert stream.finish_reason == "length" and request.params.max_frames == 2 + 2 + 4 + 8 + 16
        assert decoded == [2, 2, 4, 8, 16]
        assert set(decoded) == set(engine.core.rules.chunk_sizes())
        # Every bucket it used has its graph before ready (on a GPU).
        runner = engine.runner
        assert codec_batches == step_batches == set(buckets_before_ready(runner.batch_buckets))
        assert prefill_buckets == set(buckets_before_ready(runner.prefill_buckets))
        stats = engine.stats()
        # Real work, counted like any request's (counters never go back).
        assert stats.frames_total == request.params.max_frames
        assert stats.busy_seconds["decode"] > 0
        # The retry hints speak of users' slots only.
        assert engine.scheduler.mean_slot_seconds == slot_seconds
        phases = stats.startup_seconds
        assert list(phases) == ["import", "load_weights", "warm_up", "total"]
        assert phases["warm_up"] > 0
        assert phases["total"] == pytest.approx(
            sum(v for k, v in phases.items() if k != "total"), abs=0.05
        )
    finally:
        await engine.stop(drain_timeout_s=0)


def test_the_smallest_bucket_is_captured_before_ready_the_largest_first_after():
    assert capture_order(BATCH_BUCKETS) == (1, 256, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192)
    assert buckets_before_ready(BATCH_BUCKETS) == (1,)
    assert buckets_after_ready(BATCH_BUCKETS) == (256, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192)
    assert buckets_after_ready((32, 1024, 64, 128)) == (1024, 64, 128)
    assert (buckets_before_ready((1, 2)), buckets_after_ready((1, 2))) == ((1,), (2,))
    assert (buckets_before_ready((4,)), buckets_after_ready((4,))) == ((4,), ())


def test_the_ramp_frames_pass_every_chunk_size_once():
    def rules(first, steady):
        return StepRules(eos_id=0, max_len=100, first_chunk_frames=first, chunk_frames=steady)

    assert rules(2, 8).ramp_frames() == 2 + 2 + 4 + 8
    assert rules(3, 8).ramp_frames() == 3 + 3 + 6 + 8
    assert rules(8, 8).ramp_frames() == 8
    assert rules(8, 2).ramp_frames() == 8 + 2


async def test_codec_graphs_for_every_ramp_size_and_batch_bucket_by_ready_or_in_the_background(
    tiny_checkpoint, monkeypatch
):
    """Capture needs CUDA: here the runner claims graphs, its captures are skipped
    and the codec records each capture instead of running it (no step is run)."""
    real_init = ModelRunner.__init__

    def init(runner, *args, **kwargs):
        real_init(runner, *args, **kwargs)
        runner.use_graphs = True

    captured = []  # (batch, frames) in the order captured

    def capture(codec, batch_sizes, frame_counts):
        for b, n in [(b, n) for n in frame_counts for b in batch_sizes]:
            captured.append((b, n))
            codec._graphs[(b, n)] = "recorded"

    monkeypatch.setattr(ModelRunner, "__init__", init)
    for skipped in ("compile", "capture_decode_for_start", "capture_prefill_for_start"):
        monkeypatch.setattr(ModelRunner, skipped, lambda runner: 0.0)
    monkeypatch.setattr(StreamingCodec, "capture", capture)
    engine = TTSEngine.from_pretrained(
        str(tiny_checkpoint), "cpu", dtype="float32", max_batch=8, chunk_frames=16
    )
    core = engine.core
    core.load()
    try:
        ramp, buckets = core.rules.chunk_sizes(), core.runner.batch_buckets
        assert ramp == (2, 4, 8, 16) and buckets == (1, 2, 4, 8)
        assert core.codec_worker.frame_buckets == ramp
        # Before ready: every ramp size at the smallest bucket only.
        assert set(core.codec.codec._graphs) == {(1, n) for n in ramp}
        core.start_background_capture()  # the codec thread captures the rest
        every = {(b, n) for b in buckets for n in ramp}
        deadline = time.monotonic() + 10
        while set(core.codec.codec._graphs) != every and time.monotonic() < deadline:
            time.sleep(0.01)
        assert set(core.codec.codec._graphs) == every
        # After ready the largest batch first, at every ramp size, then small ones first.
        assert captured[len(ramp) :] == [(b, n) for b in (8, 2, 4) for n in ramp]
    finally:
        core.stop()


async def test_on_the_cpu_there_is_no_warm_up_by_default(make_engine):
    engine = await make_engine(max_batch=2)
    assert "warm_up" not in engine.stats().startup_seconds
    assert "total" in engine.stats().startup_seconds


def runner_with_recorded_captures(tiny_checkpoint, monkeypatch, max_batch: int) -> ModelRunner:
    """Capture needs CUDA: here each capture is recorded instead of run, which is
    what the bucket choice reads (the graphs it has)."""
    model = load_model(tiny_checkpoint, "cpu", "float32", max_positions=4608)
    runner = ModelRunner(
        model, max_batch=max_batch, max_len=4608, max_text=64, device="cpu", cuda_graphs=False
    )
    runner.use_graphs = True
    runner.order = []

    def capture(B):
        runner.order.append(("decode", B))
        runner.graphs[B] = f"decode graph {B}"

    def capture_prefill(P):
        runner.order.append(("prefill", P))
        runner.prefill_graphs[P] = f"prefill graph {P}"

    monkeypatch.setattr(runner, "capture", capture)
    monkeypatch.setattr(runner, "_capture_prefill", capture_prefill)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    return runner


def test_the_start_captures_the_smallest_buckets_the_largest_come_first_after_ready(
    tiny_checkpoint, monkeypatch
):
    runner = runner_with_recorded_captures(tiny_checkpoint, monkeypatch, max_batch=256)
    assert runner.batch_buckets == BATCH_BUCKETS
    assert runner.prefill_buckets == (32, 64, 128, 256, 512, 1024)

    runner.capture_decode_for_start()
    runner.capture_prefill_for_start()

    assert runner.order == [("decode", 1), ("prefill", 32)]
    # A batch no captured graph holds gets its own bucket (captured on that call).
    assert [runner._decode_bucket(b) for b in (1, 2, 3, 200, 256)] == [1, 2, 4, 256, 256]
    assert [runner._prefill_bucket(n) for n in (5, 32, 33, 1024)] == [32, 32, 64, 1024]
    assert runner.graphs_left[:4] == [
        ("decode", 256),
        ("prefill", 1024),
        ("decode", 2),
        ("prefill", 64),
    ]

    runner.order.clear()
    runner.capture_next()
    runner.capture_next()
    assert runner.order == [("decode", 256), ("prefill", 1024)]
    # Every batch and every prompt fits a graph now, padded.
    assert [runner._decode_bucket(b) for b in (1, 2, 3, 200)] == [1, 256, 256, 256]
    assert [runner._prefill_bucket(n) for n in (5, 33, 1000)] == [32, 1024, 1024]

    while runner.capture_next():
        pass
    assert len(runner.order) == 12 + 5
    assert runner.order[2:4] == [("decode", 2), ("prefill", 64)]
    assert not runner.graphs_left and not runner.capture_next()
    # Each batch now replays its own bucket.
    assert [runner._decode_bucket(b) for b in (2, 3, 25, 200)] == [2, 4, 32, 256]
    assert [runner._prefill_bucket(n) for n in (33, 300)] == [64, 512]


async def test_a_base_model_warms_up_speaking_a_clone_and_loads_its_encoders_as_weights(
    tiny_base,
):
    engine = TTSEngine.from_pretrained(str(tiny_base), "cpu", dtype="float32", warm_up=True)
    submitted = []
    real_submit = engine._submit

    def watch(request):
        stream = real_submit(request)
        submitted.append((request, stream))
        return stream

    engine._submit = watch
    phases_at_encoder_load = []
    real_load = engine._loaded_voice_encoders

    def load():
        if engine._voice_encoders is None:
            phases_at_encoder_load.append(list(engine.startup.seconds))
        return real_load()

    engine._loaded_voice_encoders = load
    await engine.start()
    try:
        # The encoders loaded first, within load_weights (before the talker's KV pool).
        assert phases_at_encoder_load == [["import"]]
        ((request, stream),) = submitted
        assert request.cloned_voice is not None and request.cloned_voice.ref_codes is None
        assert stream.finish_reason == "length" and engine.ready
        assert engine.stats().frames_total == request.params.max_frames
        assert list(engine.stats().startup_seconds) == [
            "import",
            "load_weights",
            "warm_up",
            "total",
        ]
    finally:
        await engine.stop(drain_timeout_s=0)
