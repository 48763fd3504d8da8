"""A generation that fails: a proper status before any audio, a cut stream after.

Uses the stand-in engine (support/stand_in_engine.py) because the real CPU engine
cannot be made to fail (run out of CUDA memory, or fail a batch step) on demand.
"""

from __future__ import annotations

import httpx
import pytest

from support.live_server import API_KEY, LiveServer, auth, metric_value, speech_body
from support.stand_in_engine import StandInEngine
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


def oom_server(fail_after_chunks: int, quietly: bool = False):
    engine = StandInEngine(frames=20, fail_after_chunks=fail_after_chunks, fail_quietly=quietly)
    return LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,)))


@pytest.mark.parametrize("stream_format", ["file", "audio"])
def test_oom_before_any_audio_is_503_with_retry_after(stream_format):
    with oom_server(fail_after_chunks=0) as server:
        fields = {"stream_format": stream_format}
        response = httpx.post(
            server.base_url + "/v1/audio/speech", json=speech_body(server, **fields), headers=auth()
        )
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "cuda_oom"
        assert response.headers["retry-after"] == "1"
        assert metric_value(server.base_url, "ttsfleet_errors_total", {"type": "cuda_oom"}) == 1
        assert server.runtime.drain.inflight == 0


def read_cut_stream(server) -> int:
    """Stream speech whose body the server cuts (no clean end of the chunked body);
    -> the status the headers carried."""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            server.base_url + "/v1/audio/speech",
            json=speech_body(server, stream_format="audio"),
            headers=auth(),
        ) as response,
    ):
        status = response.status_code
        b"".join(response.iter_bytes())
    return status


def test_oom_mid_stream_cuts_the_response_and_is_counted():
    with oom_server(fail_after_chunks=2) as server:
        assert read_cut_stream(server) == 200
        assert metric_value(server.base_url, "ttsfleet_errors_total", {"type": "cuda_oom"}) == 1
        assert server.runtime.drain.inflight == 0


def test_oom_mid_sse_stream_ends_with_an_error_event():
    with oom_server(fail_after_chunks=2) as server:
        with httpx.stream(
            "POST",
            server.base_url + "/v1/audio/speech",
            json=speech_body(server, stream_format="sse"),
            headers=auth(),
        ) as response:
            lines = [line for line in response.iter_lines() if line]
        assert '"type": "error"' in lines[-1] and "cuda_oom" in lines[-1]


def test_a_stream_the_engine_ends_with_error_is_not_passed_off_as_complete():
    with oom_server(fail_after_chunks=2, quietly=True) as server:
        response = httpx.post(
            server.base_url + "/v1/audio/speech",
            json=speech_body(server, stream_format="file"),
            headers=auth(),
        )
        assert response.status_code == 500
        assert response.json()["error"]["code"] == "engine_error"
        read_cut_stream(server)
        assert metric_value(server.base_url, "ttsfleet_errors_total", {"type": "engine_error"}) == 2
