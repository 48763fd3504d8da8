"""What an upload costs on disk: mono audio at the model's rate, and a per-tenant quota
of voices and bytes with a clear 409."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
import soundfile

from support.live_server import LiveServer
from support.stand_in_engine import StandInEngine
from support.voice_uploads import bearer, recording, upload, uploaded_voice_ids
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings

ALICE, BOB = "sk-alice-1", "sk-bob-1"
# Two 2 s voices at 24 kHz mono PCM16 (and their prompts) are ~200 kB; a third does not fit.
BYTES_QUOTA = 250_000


@pytest.fixture
def voices_dir(tmp_path):
    return tmp_path / "voices"


def live(voices_dir, **settings):
    settings = ServerSettings(
        voices_dir=voices_dir, max_voice_upload_bytes=2 * 1024 * 1024, **settings
    )
    engine = StandInEngine(variant="Base")
    return LiveServer(engine, settings, ApiKeys((f"alice: {ALICE}", f"bob: {BOB}")))


def test_a_high_rate_stereo_upload_is_stored_as_mono_at_the_model_rate(voices_dir):
    with live(voices_dir) as server:
        sent = recording(seconds=3, rate=192_000, channels=2, fmt="FLAC")
        created = upload(server.base_url, sent, ALICE, "me.flac")
        assert created.status_code == 201, created.text
        stored = voices_dir / created.json()["id"] / "reference.wav"
        info = soundfile.info(stored)
        model_rate = server.engine.info.sample_rate
        assert (info.samplerate, info.channels) == (model_rate, 1)
        assert info.frames == pytest.approx(3 * model_rate, abs=2)
        assert stored.stat().st_size < 3 * model_rate * 2 + 1024
        # Resampled, not truncated or decimated into noise: the 180 Hz tone survives.
        pcm, _ = soundfile.read(stored, dtype="float32")
        spectrum = np.abs(np.fft.rfft(pcm[model_rate // 2 : model_rate // 2 + model_rate]))
        assert int(np.argmax(spectrum)) == 180


def test_a_tenant_over_its_voice_count_gets_409_and_others_are_unaffected(voices_dir):
    with live(voices_dir, max_voices_per_tenant=2) as server:
        first, second = (upload(server.base_url, recording(), ALICE).json()["id"] for _ in range(2))
        refused = upload(server.base_url, recording(), ALICE)
        assert refused.status_code == 409, refused.text
        error = refused.json()["error"]
        assert error["code"] == "voice_quota_exceeded" and "2 of 2 voices" in error["message"]
        assert sorted(uploaded_voice_ids(server.base_url, ALICE)) == sorted([first, second])
        assert upload(server.base_url, recording(), BOB).status_code == 201
        # Erasing one makes room again.
        httpx.delete(
            server.base_url + f"/v1/audio/voices/{first}", headers=bearer(ALICE)
        ).raise_for_status()
        assert upload(server.base_url, recording(), ALICE).status_code == 201


def test_a_tenant_over_its_bytes_gets_409_and_nothing_is_left_behind(voices_dir):
    with live(voices_dir, max_voice_bytes_per_tenant=BYTES_QUOTA) as server:
        assert upload(server.base_url, recording(), ALICE).status_code == 201
        assert upload(server.base_url, recording(), ALICE).status_code == 201
        before = sorted(p.name for p in voices_dir.iterdir())
        refused = upload(server.base_url, recording(), ALICE)
        assert refused.status_code == 409, refused.text
        assert "voice storage quota" in refused.json()["error"]["message"]
        assert sorted(p.name for p in voices_dir.iterdir()) == before
        assert upload(server.base_url, recording(), BOB).status_code == 201


def test_parallel_uploads_cannot_overshoot_the_count(voices_dir):
    import concurrent.futures

    with live(voices_dir, max_voices_per_tenant=3) as server:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            codes = list(
                pool.map(
                    lambda _: upload(server.base_url, recording(), ALICE).status_code, range(6)
                )
            )
        assert sorted(codes) == [201, 201, 201, 409, 409, 409]
        assert len(uploaded_voice_ids(server.base_url, ALICE)) == 3
