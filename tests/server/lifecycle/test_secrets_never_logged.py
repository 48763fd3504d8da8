"""Keys never reach the log: `ttsfleet serve` as a pod runs it, a browser-style
WebSocket with its key in the URL, and the whole captured log grepped."""

from __future__ import annotations

import json

import httpx
from websockets.sync.client import connect

from support.runtime import RuntimeProcess

SECRETS = ("sk-query-5f1d2e9a", "sk-header-77ab01cd", "sk-token-0c9e4411")
# The server decodes a percent-encoded parameter name (`api%5Fkey` is `api_key`).
ENCODED_NAMES = {"api%5Fkey": "sk-encoded-3b7c9d10", "%61pi_key": "sk-encoded-8e2f4a66"}


def test_keys_in_urls_and_headers_are_masked_in_every_log_line(tmp_path, tiny_custom_voice):
    server = RuntimeProcess(
        tmp_path, tiny_custom_voice, "--max-audio-seconds", "0.4", log_level="info"
    )
    try:
        server.wait_ready()
        url = f"ws://127.0.0.1:{server.port}/v1/audio/speech/stream?api_key={SECRETS[0]}"
        with connect(url, open_timeout=10) as ws:
            ws.send(json.dumps({"type": "session.config"}))
            assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
            ws.send(json.dumps({"type": "end"}))
            while json.loads(ws.recv(timeout=30))["type"] != "session.done":
                pass
        httpx.get(
            server.base + f"/v1/models?token={SECRETS[2]}",
            headers={"Authorization": f"Bearer {SECRETS[1]}"},
        )
        httpx.get(server.base + f"/no/such?access_token={SECRETS[2]}")
        for name, secret in ENCODED_NAMES.items():
            url = f"ws://127.0.0.1:{server.port}/v1/audio/speech/stream?{name}={secret}"
            with connect(url, open_timeout=10) as ws:
                ws.send(json.dumps({"type": "session.config"}))
                assert json.loads(ws.recv(timeout=10))["type"] == "session.ready"
    finally:
        server.stop()
    log = server.log_text()
    assert (
        "WebSocket /v1/audio/speech/stream?api_key=[redacted]" in log
    )  # uvicorn's line, still there
    for secret in (*SECRETS, *ENCODED_NAMES.values()):
        assert secret not in log


def test_redaction_keeps_names_and_masks_values():
    from ttsfleet_runtime.server.json_logging import redact

    assert redact("GET /x?api_key=abc&lang=en&accessToken=def;sig=1") == (
        "GET /x?api_key=[redacted]&lang=en&accessToken=[redacted];sig=[redacted]"
    )
    assert redact("Authorization: Bearer sk-1") == "Authorization: Bearer [redacted]"
    assert (
        redact('{"authorization": "Basic dXNlcjpwYXNz"}') == '{"authorization": "Basic [redacted]"}'
    )
    assert redact("x-api-key: sk-2") == "x-api-key: [redacted]"
    assert redact("GET /x?api%5Fkey=abc&%61pi_key=def&%2561pi%5fkey=ghi&lang=en") == (
        "GET /x?api%5Fkey=[redacted]&%61pi_key=[redacted]&%2561pi%5fkey=[redacted]&lang=en"
    )
    assert redact("GET /x?api+key=abc") == "GET /x?api+key=[redacted]"
    assert (
        redact("text longer than 1024 tokens; monkey=3") == "text longer than 1024 tokens; monkey=3"
    )
