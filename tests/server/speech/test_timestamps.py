"""`POST /v1/audio/speech/with-timestamps` over the real tiny engine, read by a real
HTTP client: JSON lines of audio and alignment as the audio streams, one JSON object
with the whole file, and SRT/WebVTT captions of the utterance. Word times are checked
against the frame schedule the model's dual track implies: a voice without a
reference recording reads text token k at frame k (engine/word_timing.py)."""

from __future__ import annotations

import base64
import json
import re

import httpx

from support.live_server import API_KEY, SHORT_AUDIO_S, LiveServer, auth, speech_body
from support.stand_in_engine import StandInEngine
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

URL = "/v1/audio/speech/with-timestamps"
TEXT = "Hello there, how are you?"
FRAME_S = 1 / 12.5


def frame_schedule(server, text: str) -> dict[str, float]:
    """Each word's start by the rule: the frame that reads its first token."""
    _, offsets = server.runtime.engine.builder.tokenizer.encode_offsets(text)
    return {
        m.group(): next(i for i, (a, b) in enumerate(offsets) if a <= m.start() < b) * FRAME_S
        for m in re.finditer(r"\S+", text)
    }


def stream_lines(server, **fields) -> tuple[httpx.Response, list[dict]]:
    with (
        httpx.Client(timeout=60) as client,
        client.stream(
            "POST",
            server.base_url + URL,
            json=speech_body(server, input=TEXT, **fields),
            headers=auth(),
        ) as response,
    ):
        lines = [json.loads(line) for line in response.iter_lines() if line]
    return response, lines


def test_json_lines_carry_audio_and_the_words_timed_with_it(server):
    response, lines = stream_lines(server, captions="vtt")
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    *chunks, last = lines
    assert last["done"] is True and len(chunks) > 1
    pcm = b"".join(base64.b64decode(line["audio_base64"]) for line in lines)
    assert len(pcm) == 2 * round(SHORT_AUDIO_S * 24000) == 2 * round(last["audio_seconds"] * 24000)

    words = [w for line in chunks for w in line["words"]]
    expected = frame_schedule(server, TEXT)
    assert [w["word"] for w in words] == TEXT.split()
    for w in words:  # the error against the frame schedule: none (well within a frame)
        assert abs(w["start_time"] - expected[w["word"]]) < 1e-3, w
    assert words[-1]["end_time"] == SHORT_AUDIO_S  # the last word runs to the audio's end
    # ElevenLabs' character alignment: the text's characters, each with its times.
    aligned = [line["alignment"] for line in chunks if line["alignment"]]
    characters = [c for a in aligned for c in a["characters"]]
    starts = [t for a in aligned for t in a["character_start_times_seconds"]]
    ends = [t for a in aligned for t in a["character_end_times_seconds"]]
    assert "".join(characters) == TEXT
    assert len(starts) == len(ends) == len(characters)
    assert starts == sorted(starts) and all(s <= e for s, e in zip(starts, ends, strict=True))
    # The words are timed ahead of the audio: the first line already has "Hello".
    assert chunks[0]["words"][0]["word"] == "Hello"
    assert last["captions"].startswith("WEBVTT\n\n00:00:00.000 --> ")
    assert "Hello there, how are you?" in last["captions"]


def test_one_json_object_with_the_whole_file_and_srt_captions(server):
    body = speech_body(server, input=TEXT, response_format="flac", stream_format="json")
    response = httpx.post(
        server.base_url + URL, json={**body, "captions": "srt"}, headers=auth(), timeout=60
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert base64.b64decode(result["audio_base64"])[:4] == b"fLaC"
    assert [w["word"] for w in result["words"]] == TEXT.split()
    assert "".join(result["alignment"]["characters"]) == TEXT
    assert result["captions"] == (
        f"1\n00:00:00,000 --> 00:00:0{SHORT_AUDIO_S:.3f}".replace(".", ",")
        + "\nHello there, how are you?\n"
    )


def test_streamed_json_lines_need_a_streamable_format(server):
    body = speech_body(server, input=TEXT, response_format="flac")
    response = httpx.post(server.base_url + URL, json=body, headers=auth(), timeout=30)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "response_format"


def test_the_speech_endpoint_is_unchanged_by_timestamps(server):
    """The OpenAI-shaped endpoint still answers audio bytes, not JSON."""
    response = httpx.post(
        server.base_url + "/v1/audio/speech",
        json=speech_body(server, input=TEXT, stream_format="file"),
        headers=auth(),
        timeout=60,
    )
    assert response.status_code == 200
    assert len(response.content) == 2 * round(SHORT_AUDIO_S * 24000)


def test_a_failure_mid_stream_ends_the_lines_with_an_error():
    engine = StandInEngine(frames=20, fail_after_chunks=2)
    with LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,))) as server:
        response, lines = stream_lines(server)
        assert response.status_code == 200
        assert lines[-1] == {
            "error": {"message": "generation failed", "code": "cuda_oom"},
            "done": True,
        }
        assert all("audio_base64" in line for line in lines[:-1]) and len(lines) == 3
        assert server.runtime.drain.inflight == 0
