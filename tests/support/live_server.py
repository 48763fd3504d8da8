"""A real uvicorn server on 127.0.0.1 (a free port) in a background thread, configured
as `ttsfleet serve` configures it (limits, timeouts, protocol); the API keys the server
tests' servers accept, and the client side: auth header, one metric."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn

from ttsfleet_runtime.server.app import create_app
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.serve import uvicorn_config
from ttsfleet_runtime.settings import ServerSettings

API_KEY = "test-key-alice"
OTHER_KEY = "test-key-bob"
# 20 frames at 12.5 Hz: about half a second of CPU per utterance.
SHORT_AUDIO_S = 1.6


def guarded_protocol(parser: str, settings: ServerSettings) -> type:
    """The server's protocol class for one HTTP/1.1 parser ("h11" or "httptools"),
    whichever `ttsfleet serve` would choose here; for `LiveServer(http=...)`."""
    from ttsfleet_runtime.server import http_protocol

    make = {
        "h11": http_protocol.guarded_h11_protocol,
        "httptools": http_protocol.guarded_httptools_protocol,
    }[parser]
    return make(settings.http_header_timeout_s, settings.max_header_bytes, settings.send_timeout_s)


class LiveServer:
    def __init__(self, engine, settings: ServerSettings, api_keys: ApiKeys, **config):
        """`config`: uvicorn.Config options over those of `uvicorn_config`."""
        self.app = create_app(engine, settings, api_keys)
        self.runtime = self.app.state.runtime
        self.engine = engine
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        config = uvicorn_config(self.app, settings, **{"timeout_graceful_shutdown": 2, **config})
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        async def serve():
            self.loop = asyncio.get_running_loop()
            await self.server.serve(sockets=[self._sock])

        asyncio.run(serve())

    def call(self, fn, *args):
        """Run `fn(*args)` (a coroutine function) on the server's loop."""
        return asyncio.run_coroutine_threadsafe(fn(*args), self.loop).result(timeout=30)

    def __enter__(self):
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self._thread.join(timeout=30)


def auth(key: str = API_KEY) -> dict:
    return {"Authorization": f"Bearer {key}"}


def speech_body(server, **fields) -> dict:
    """A /v1/audio/speech body the server accepts (raw PCM of a short input); `fields`
    override or add to it."""
    return {
        "model": server.runtime.served_models[0],
        "voice": "Vivian",
        "input": "Hi",
        "response_format": "pcm",
        **fields,
    }


def metric_value(base_url: str, name: str, labels: dict | None = None) -> float:
    """One sample of the server's /metrics (0.0 when the series is absent)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(base_url + "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(
                sample.labels.get(k) == v for k, v in (labels or {}).items()
            ):
                return sample.value
    return 0.0
