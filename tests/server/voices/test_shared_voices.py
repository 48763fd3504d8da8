"""One voice store for a fleet: two `serve` processes over one real redis-server.

A voice uploaded through one pod is spoken by the other; erased through the second,
the first stops speaking it within seconds (its cache hears the erasure by pub/sub,
or at worst at its next reconciliation). The engine is the stand-in's Base variant
(support/stand_in_serve.py), everything else the real runtime process; one test runs
the real engine on a tiny random Base checkpoint, encoders and in-context prompt included.
"""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from support.polling import wait_for
from support.redis_server import PASSWORD
from support.runtime import RuntimeProcess, write_tiny_checkpoint
from support.voice_uploads import recording, upload
from ttsfleet_runtime.server.voice_library import RECONCILE_S


@pytest.fixture
def pods(tmp_path, redis_url):
    env = {"TTSFLEET_VOICE_STORE_URL": redis_url}
    flags = ("--anonymous-voices", "on", "--log-level", "info")
    started = [
        RuntimeProcess(tmp_path, None, *flags, name=name, env=env, log_level="info")
        for name in ("pod-a", "pod-b")
    ]
    try:
        yield [pod.wait_ready(timeout=60) for pod in started]
    finally:
        for pod in started:
            pod.stop()


def speak(pod, voice: str, model: str = "stand-in-tiny-Base") -> httpx.Response:
    return httpx.post(
        pod.base + "/v1/audio/speech",
        json={
            "model": model,
            "input": "Hello",
            "voice": voice,
            "response_format": "pcm",
            "stream_format": "file",
        },
        timeout=30,
    )


def pitch(pcm: bytes) -> int:
    samples = np.frombuffer(pcm, np.int16).astype(np.float32)
    return int(np.argmax(np.abs(np.fft.rfft(samples[:24000])))) * 24000 // min(len(samples), 24000)


def test_upload_through_one_pod_speak_through_another_erase_everywhere(pods):
    pod_a, pod_b = pods
    created = upload(pod_a.base, recording(), None)
    assert created.status_code == 201, created.text
    voice_id = created.json()["id"]

    # Pod B never saw the upload: it reads the prompt from the shared store.
    from_b = speak(pod_b, voice_id)
    assert from_b.status_code == 200, from_b.text
    from_a = speak(pod_a, voice_id)
    assert from_a.content == from_b.content  # the same voice, whichever pod speaks it
    other = upload(pod_b.base, recording(seconds=3.0), None).json()["id"]
    assert pitch(speak(pod_a, other).content) != pitch(from_a.content)

    erased = httpx.delete(pod_b.base + f"/v1/audio/voices/{voice_id}")
    assert erased.status_code == 200
    erased_at = time.monotonic()

    def gone_from_a() -> bool:
        return speak(pod_a, voice_id).status_code == 400

    wait_for(gone_from_a, RECONCILE_S, interval=0.05, what="pod A to stop speaking the voice")
    # Pub/sub reaches pod A well before its reconciliation would.
    assert time.monotonic() - erased_at < 2.0
    refused = speak(pod_a, voice_id).json()["error"]
    assert refused["param"] == "voice" and "unknown voice" in refused["message"]
    assert httpx.get(pod_a.base + f"/v1/audio/voices/{voice_id}").status_code == 404
    assert httpx.get(pod_a.base + f"/v1/audio/voices/{voice_id}/export").status_code == 404
    assert httpx.delete(pod_a.base + f"/v1/audio/voices/{voice_id}").status_code == 404

    for pod in pods:  # the store's password never reaches a log line
        log = pod.log_text()
        assert "voice store open" in log and PASSWORD not in log


def test_a_missed_erasure_is_caught_by_reconciliation(pods, redis_server):
    """An erasure whose announcement never came (made behind the pods' backs, as
    a lost pub/sub message looks): the cache lets go within RECONCILE_S."""
    from ttsfleet_runtime.server.voice_store_redis import voice_key

    pod_a, _ = pods
    voice_id = upload(pod_a.base, recording(), None).json()["id"]
    assert speak(pod_a, voice_id).status_code == 200  # now cached on pod A
    redis_server.client().delete(voice_key(voice_id))  # no PUBLISH
    deleted_at = time.monotonic()
    wait_for(
        lambda: speak(pod_a, voice_id).status_code == 400,
        RECONCILE_S + 3,
        interval=0.1,
        what="reconciliation",
    )
    assert time.monotonic() - deleted_at <= RECONCILE_S + 3


def test_a_real_base_checkpoint_clones_on_upload_and_speaks_from_the_store(tmp_path, redis_url):
    """The real engine end to end: pod A clones the upload with its encoders and
    stores the prompt; pod B, which never saw the recording, speaks the voice from
    the store through the in-context prompt and primed codec."""
    checkpoint = write_tiny_checkpoint(tmp_path / "tiny-base", "Base")
    env = {"TTSFLEET_VOICE_STORE_URL": redis_url}
    # Random weights never say EOS: every utterance runs to --max-audio-seconds (5 frames).
    flags = ("--anonymous-voices", "on", "--max-audio-seconds", "0.4")
    started = [
        RuntimeProcess(tmp_path, checkpoint, *flags, name=name, env=env)
        for name in ("base-a", "base-b")
    ]
    try:
        pod_a, pod_b = (pod.wait_ready(timeout=240) for pod in started)
        (model,) = (m["id"] for m in httpx.get(pod_a.base + "/v1/models").json()["data"])
        created = upload(pod_a.base, recording(), None)
        assert created.status_code == 201, created.text
        spoken = speak(pod_b, created.json()["id"], model)
        assert spoken.status_code == 200, spoken.text
        assert len(spoken.content) == 5 * 1920 * 2  # 5 frames of 16-bit PCM at 24 kHz
        assert np.abs(np.frombuffer(spoken.content, np.int16)).max() > 0
        refused = speak(pod_b, "no-such-voice", model)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "voice"
    finally:
        for pod in started:
            pod.stop()
