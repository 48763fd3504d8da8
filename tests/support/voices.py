"""Helpers of the voice tests (tests/server/voices): a clock the test moves, the
settings of a cloning server, a voice stored straight into a store, and the bodies of
a speech request and of a one-shot clone."""

from __future__ import annotations

import base64
import contextlib
import subprocess

import httpx
import numpy as np
import pytest

from support.live_server import API_KEY, SHORT_AUDIO_S, auth
from support.voice_uploads import recording
from ttsfleet_runtime.settings import ServerSettings

SPEECH = "/v1/audio/speech"

PCM = np.sin(np.arange(24_000) / 10).astype(np.float32) * 0.3  # 1 s at 24 kHz
PROMPT = b"npz bytes of a ClonedVoice"


class Clock:
    """Unix time that moves only when the test says so."""

    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def clone_settings(**fields) -> ServerSettings:
    """Settings of a server that clones: small bodies and short audio, then `fields`."""
    return ServerSettings(
        **{
            "max_body_bytes": 16 * 1024,
            "max_voice_upload_bytes": 400 * 1024,
            "max_audio_seconds": SHORT_AUDIO_S,
            **fields,
        }
    )


def store_voice(store, owner="tenant-a", prompt=PROMPT, pcm=PCM):
    """A voice written straight into `store`, as an upload would leave it."""
    return store.create(
        pcm=pcm,
        sample_rate=24_000,
        name="Alice",
        transcript="Hello there.",
        language="english",
        owner=owner,
        consent_statement="Alice agreed on 2026-11-01.",
        prompt=prompt,
    )


def speak(server, key=API_KEY, **fields) -> httpx.Response:
    """One speech request as a file of PCM; `fields` add to or replace the body."""
    body = {
        "model": server.runtime.served_models[0],
        "input": "Hello",
        "response_format": "pcm",
        "stream_format": "file",
        **fields,
    }
    return httpx.post(server.base_url + SPEECH, json=body, headers=auth(key), timeout=30)


def one_shot(reference: bytes = b"", **fields) -> dict:
    """The `voice_clone` part of a speech request (a recording, its transcript, consent)."""
    return {
        "audio": base64.b64encode(reference or recording()).decode(),
        "transcript": "Hello, this is my voice.",
        "consent": True,
        **fields,
    }


@contextlib.contextmanager
def tmpfs(mount_point, options: str):
    """A tmpfs of `options` (e.g. "size=64k") mounted on the existing folder `mount_point`
    for the block, unmounted after; the test is skipped where mounting is not allowed
    (it needs root). A real full disk, not an injected error."""
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (it needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
