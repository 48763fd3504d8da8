"""Error accounting: the canary and the alerts read server faults only, so what a
client causes must never be counted as one; a cut stream is not a 200.

Failures on demand come from the stand-in engine (stand_in_engine.py): the real
CPU engine cannot be made to fail mid-stream at a chosen chunk.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from support.live_server import API_KEY, LiveServer, auth, metric_value, speech_body
from support.polling import wait_for
from support.stand_in_engine import StandInEngine
from ttsfleet_runtime import metrics
from ttsfleet_runtime.engine import api
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.synthesis import error_type
from ttsfleet_runtime.settings import ServerSettings

SPEECH = "/v1/audio/speech"


def errors_by_type(server) -> dict[str, float]:
    kinds = (
        "internal",
        "cuda_oom",
        "engine_error",
        "invalid_request",
        "client_disconnect",
        "engine_stopped",
    )
    return {t: metric_value(server.base_url, metrics.ERRORS, {"type": t}) for t in kinds}


def requests_by_code(server) -> dict[str, float]:
    return {
        c: metric_value(server.base_url, metrics.REQUESTS, {"route": SPEECH, "code": c})
        for c in ("200", "400", "499", "500")
    }


def stream_audio(server):
    return httpx.stream(
        "POST",
        server.base_url + SPEECH,
        json=speech_body(server, stream_format="audio"),
        headers=auth(),
    )


def read_cut_stream(server) -> None:
    with pytest.raises(httpx.RemoteProtocolError), stream_audio(server) as response:
        assert response.status_code == 200
        b"".join(response.iter_bytes())


def test_a_stream_the_engine_cuts_counts_one_server_fault_with_status_500():
    engine = StandInEngine(frames=20, fail_after_chunks=2, fail_quietly=True)
    with LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,))) as server:
        read_cut_stream(server)
        counted = {k: v for k, v in errors_by_type(server).items() if v}
        assert counted == {"engine_error": 1}
        assert {k: v for k, v in requests_by_code(server).items() if v} == {"500": 1}


@pytest.mark.parametrize(
    "message",
    [
        "text longer than 1024 tokens",
        # Echoed client text must not make the client's error a CUDA OOM.
        "text 'I ran out of memory' is longer than 1024 tokens",
    ],
)
def test_text_the_engine_refuses_mid_stream_is_the_clients_fault(message):
    engine = StandInEngine(frames=20, fail_after_chunks=2, fail_with=api.InvalidRequest(message))
    with LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,))) as server:
        read_cut_stream(server)
        refused = httpx.post(
            server.base_url + SPEECH, json=speech_body(server, stream_format="file"), headers=auth()
        )
        assert refused.status_code == 400
        assert "1024 tokens" in refused.json()["error"]["message"]
        assert {k: v for k, v in errors_by_type(server).items() if v} == {"invalid_request": 2}
        assert {k: v for k, v in requests_by_code(server).items() if v} == {"400": 2}


def test_a_client_leaving_mid_stream_is_499_and_no_server_fault():
    engine = StandInEngine(frames=400, frame_s=0.02)
    with LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,))) as server:
        with stream_audio(server) as response:
            next(response.iter_bytes())
        wait_for(
            lambda: requests_by_code(server)["499"] == 1, timeout=20, interval=0.05, what="a 499"
        )
        wait_for(
            lambda: server.runtime.drain.inflight == 0,
            timeout=20,
            interval=0.05,
            what="the slot freed",
        )
        assert {k: v for k, v in errors_by_type(server).items() if v} == {"client_disconnect": 1}
        assert {k: v for k, v in requests_by_code(server).items() if v} == {"499": 1}


def test_every_error_type_the_server_names_is_in_exactly_one_group():
    groups = (metrics.SERVER_FAULT_ERRORS, metrics.CLIENT_FAULT_ERRORS, metrics.CAPACITY_ERRORS)
    grouped = [t for group in groups for t in group]
    assert len(grouped) == len(set(grouped))
    server_dir = Path(errors.__file__).parent
    source = "\n".join(p.read_text() for p in server_dir.glob("*.py"))
    named = set(re.findall(r'\bcode="(\w+)"', source)) | set(
        re.findall(r'labels\(type="(\w+)"\)', source)
    )
    named |= set(errors._STATUS_CODES.values())
    named |= {
        error_type(e)
        for e in (
            RuntimeError("x"),
            api.EngineError("x"),
            api.InvalidRequest("x"),
            api.EngineStopped("x"),
            RuntimeError("CUDA out of memory"),
        )
    }
    assert named - set(grouped) == set()
    assert set(metrics.SERVER_FAULT_ERRORS) == {
        "internal",
        "cuda_oom",
        "engine_error",
    }  # what the canary reads


def test_a_client_gone_as_the_headers_go_out_is_499_and_frees_the_slot():
    """Starlette cancels a response whose client left before its body started;
    the body generator then never runs, so its cleanup cannot be what frees the
    slot, the drain's count and the engine. Driven at the ASGI level, on the live
    server's loop: a real socket cannot time its close into that instant."""
    engine = StandInEngine(frames=400, frame_s=0.02)
    with LiveServer(engine, ServerSettings(), ApiKeys((API_KEY,))) as server:
        body = json.dumps(speech_body(server, stream_format="audio")).encode()

        async def leave_as_the_headers_go_out():
            gone = asyncio.Event()
            requested = False

            async def receive():
                nonlocal requested
                if not requested:
                    requested = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message):
                if message["type"] == "http.response.start":
                    gone.set()  # the client is gone while the headers are written
                    await asyncio.sleep(0.05)

            scope = {
                "type": "http",
                "asgi": {"version": "3.0", "spec_version": "2.3"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": SPEECH,
                "raw_path": SPEECH.encode(),
                "root_path": "",
                "query_string": b"",
                "headers": [
                    (b"authorization", auth()["Authorization"].encode()),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
                "client": ("127.0.0.1", 40000),
                "server": ("127.0.0.1", server.port),
            }
            await server.app(scope, receive, send)

        server.call(leave_as_the_headers_go_out)
        wait_for(
            lambda: server.runtime.drain.inflight == 0 and engine.stats().active == 0,
            timeout=20,
            interval=0.05,
            what="the slot freed",
        )
        assert {k: v for k, v in requests_by_code(server).items() if v} == {"499": 1}
        assert {k: v for k, v in errors_by_type(server).items() if v} == {"client_disconnect": 1}
