"""Each playing stream's lead over playback (audio handed out - seconds since its
first chunk): the smallest is reported, a step with one below 0 counts as an
underrun, and the spare time the scheduler is told accounts for the frames a
stream's next chunk still needs."""

from __future__ import annotations

import dataclasses

import pytest

from support.engine_requests import request
from support.playing_sequence import PlayingSequence
from ttsfleet_runtime.engine.api import EngineStats
from ttsfleet_runtime.engine.tts_engine import TTSEngine
from ttsfleet_runtime.metrics import RuntimeMetrics

FRAME_S = 0.08  # the tiny checkpoint's frame: 12.5 a second (12 Hz)


@dataclasses.dataclass
class Stream:
    first_audio_at: float | None
    frames_decoded: int  # by the codec worker; all of them delivered (12 Hz holds none back)

    @property
    def audio_delivered_s(self) -> float:
        return self.frames_decoded * FRAME_S


def seconds_ago(s: float) -> float:
    return NOW - s


NOW = 1000.0


@pytest.fixture
def core(tiny_checkpoint):
    return TTSEngine.from_pretrained(str(tiny_checkpoint), "cpu", chunk_frames=8).core


def test_the_smallest_lead_is_reported_and_a_stream_out_of_audio_is_an_underrun(core):
    core.step_s = 0.05
    behind = PlayingSequence(
        Stream(seconds_ago(1.0), 10), frames=10, pending=[]
    )  # 0.8 s heard in 1 s
    ahead = PlayingSequence(Stream(seconds_ago(1.0), 30), frames=34, pending=[0] * 4)
    silent = PlayingSequence(Stream(None, 0), frames=1, pending=[0])  # not playing yet: no lead
    core.scheduler.running.update({0: behind, 1: ahead, 2: silent})

    spare = core._sample_leads(NOW)

    assert core.min_lead_s == pytest.approx(10 * FRAME_S - 1.0)
    assert core.underrun_steps == 1
    # `behind` has no chunk in flight and needs 8 more frames for its next one.
    assert spare == pytest.approx(10 * FRAME_S - 1.0 - 8 * 0.05)


def test_a_young_stream_owes_only_its_next_ramp_chunk(core):
    core.step_s = 0.05
    # First chunk (2 frames) delivered 0.1 s ago; its second chunk is 2 frames too.
    young = PlayingSequence(Stream(seconds_ago(0.1), 2), frames=2, pending=[], chunks=1)
    core.scheduler.running[0] = young
    assert core._sample_leads(NOW) == pytest.approx(2 * FRAME_S - 0.1 - 2 * 0.05)


def test_a_chunk_on_its_way_to_the_listener_needs_no_more_steps(core):
    core.step_s = 0.05
    # 16 frames generated and handed over, 8 of them delivered: 8 in flight.
    in_flight = PlayingSequence(Stream(seconds_ago(0.5), 8), frames=16, pending=[])
    core.scheduler.running[0] = in_flight
    assert core._sample_leads(NOW) == pytest.approx(8 * FRAME_S - 0.5)
    assert core.underrun_steps == 0
    core.scheduler.running.clear()
    assert core._sample_leads(NOW) is None and core.min_lead_s is None


def test_batch_work_has_no_listener_and_no_lead(core):
    # A batch row's audio goes to a bucket: a fresh one, a frame ahead, must not put the
    # scheduler on its guarded prefill budget, nor count as an underrun when behind.
    core.step_s = 0.05
    fresh = PlayingSequence(
        Stream(seconds_ago(0.1), 2), frames=2, pending=[], chunks=1, background=True
    )
    behind = PlayingSequence(Stream(seconds_ago(1.0), 10), frames=10, pending=[], background=True)
    core.scheduler.running.update({0: fresh, 1: behind})
    assert core._sample_leads(NOW) is None and core.min_lead_s is None
    assert core.underrun_steps == 0
    listened = PlayingSequence(Stream(seconds_ago(0.5), 8), frames=16, pending=[])
    core.scheduler.running[2] = listened
    assert core._sample_leads(NOW) == pytest.approx(8 * FRAME_S - 0.5)


async def test_a_running_engine_measures_its_streams_leads(make_engine):
    engine = await make_engine(max_batch=2)
    stream = engine.submit(request(frames=12, seed=1))
    leads = []
    async for _ in stream:
        leads.append(engine.stats().min_lead_s)
    assert stream.seq.stream.first_audio_at is not None
    assert stream.seq.stream.frames_delivered == 12
    assert stream.seq.stream.audio_delivered_s == pytest.approx(12 * FRAME_S)
    assert any(lead is not None for lead in leads)


def test_the_leads_are_exported_to_prometheus():
    stats = EngineStats(
        queue_depth=0,
        active=1,
        max_batch=4,
        max_queue=8,
        frames_total=10,
        min_lead_s=0.25,
        underrun_steps_total=3,
        prefill_deferred_total=2,
    )
    text = RuntimeMetrics(lambda: stats, lambda: True).render()[0].decode()
    assert "ttsfleet_stream_lead_min_seconds 0.25" in text
    assert "ttsfleet_underrun_steps_total 3.0" in text
    assert "ttsfleet_prefill_deferred_total 2.0" in text
    quiet = dataclasses.replace(stats, min_lead_s=None)
    text = RuntimeMetrics(lambda: quiet, lambda: True).render()[0].decode()
    assert "ttsfleet_stream_lead_min_seconds" not in text


def test_a_paused_stream_is_no_underrun(core):
    # Its client stopped reading: audio waits for it, the engine is not what it waits for.
    core.step_s = 0.05
    stopped_reading = PlayingSequence(
        Stream(seconds_ago(60.0), 10), frames=10, pending=[], paused=True
    )
    core.scheduler.running.update({0: stopped_reading})

    assert core._sample_leads(NOW) is None
    assert core.min_lead_s is None and core.underrun_steps == 0
