"""A batch run by a real server's worker through the openai SDK, the real Redis and the
real S3 server: it goes to completed, its output file names each item's audio (which
decodes, with the checksum it names) once, an item that fails for its own reason is in
the error file, and the workers recorded each item once."""

from __future__ import annotations

import hashlib
import io
import wave

import openai
import pytest

from support.batches import ITEM_AUDIO_S, jsonl, model, recorded, speech_line, submit, wait_status
from support.s3_server import BUCKET


def test_a_batch_runs_to_completed_and_every_item_is_in_the_output_once(
    client, batch_server, s3_server, redis_server
):
    registry = batch_server.runtime.metrics.registry

    def items(outcome: str) -> float:
        return registry.get_sample_value("ttsfleet_batch_items_total", {"outcome": outcome}) or 0

    before = {o: items(o) for o in ("completed", "failed")}
    audio_before = registry.get_sample_value("ttsfleet_batch_audio_seconds_total") or 0
    names = [f"chapter-{i}" for i in range(5)]
    lines = [speech_line(n, model(batch_server)) for n in names]
    lines.append(speech_line("no-such-voice", model(batch_server), voice="Nobody"))
    batch = submit(client, lines)
    assert batch.status == "validating" and batch.request_counts.total == 6

    done = wait_status(client, batch.id, ("completed",))
    assert (done.request_counts.completed, done.request_counts.failed) == (5, 1)
    assert done.in_progress_at and done.finalizing_at and done.completed_at
    outputs = jsonl(client, done.output_file_id)
    assert sorted(o["custom_id"] for o in outputs) == names  # each once
    for line in outputs:
        body = line["response"]["body"]
        data = (s3_server.root / BUCKET / body["key"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == body["sha256"] and len(data) == body["bytes"]
        with wave.open(io.BytesIO(data)) as audio:
            seconds = audio.getnframes() / audio.getframerate()
        assert seconds == pytest.approx(ITEM_AUDIO_S, abs=0.1)
        assert body["duration_s"] == pytest.approx(seconds, abs=0.01)
    (error,) = jsonl(client, done.error_file_id)
    assert error["custom_id"] == "no-such-voice"
    assert error["response"]["status_code"] == 400
    assert "Nobody" in error["response"]["body"]["error"]["message"]
    # What the workers recorded (not only the file): one result per item.
    assert len(recorded(redis_server.client(), batch.id)) == 6
    assert [b.id for b in client.batches.list(limit=100).data].count(batch.id) == 1
    # The pod's metrics say the same: five done, one failed, their audio, none held.
    assert (items("completed") - before["completed"], items("failed") - before["failed"]) == (5, 1)
    audio = registry.get_sample_value("ttsfleet_batch_audio_seconds_total") - audio_before
    assert audio == pytest.approx(5 * ITEM_AUDIO_S, abs=0.5)
    assert registry.get_sample_value("ttsfleet_batch_items_held") == 0
    assert registry.get_sample_value("ttsfleet_batch_items_allowed") >= 1
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)  # a completed batch cannot be
