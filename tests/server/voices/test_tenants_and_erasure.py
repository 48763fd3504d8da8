"""Who owns a voice and how it is erased: a stable tenant per key (so rotation keeps
voices), no shared anonymous store by accident, no staging leftovers after a restart,
and the admin's `ttsfleet voices delete` for data-protection requests."""

from __future__ import annotations

import json
import logging
import os
import subprocess

import httpx
import numpy as np
import pytest

from support.live_server import LiveServer
from support.runtime import ttsfleet
from support.stand_in_engine import StandInEngine
from support.voice_uploads import bearer, recording, upload, uploaded_voice_ids
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.voice_store_local import LocalVoiceStore
from ttsfleet_runtime.settings import ServerSettings


def rewrite(path, text: str) -> None:
    """Replace a keys file the way a Secret rotation does: a new file renamed over it."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    os.replace(fresh, path)


def test_rotating_a_named_key_keeps_the_tenants_voices(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("tenant-a: sk-old\ntenant-b: sk-b\n")
    settings = ServerSettings(voices_dir=tmp_path / "voices")
    with LiveServer(
        StandInEngine(variant="Base"), settings, ApiKeys(keys_file=keys_file)
    ) as server:
        voice = upload(server.base_url, recording(), "sk-old").json()
        consent = json.loads((tmp_path / "voices" / voice["id"] / "consent.json").read_text())
        assert consent["given_by"] == "tenant-a"

        rewrite(keys_file, "tenant-a: sk-new\ntenant-b: sk-b\n")
        assert (
            httpx.get(server.base_url + "/v1/models", headers=bearer("sk-old")).status_code == 401
        )
        assert uploaded_voice_ids(server.base_url, "sk-new") == [voice["id"]]
        assert uploaded_voice_ids(server.base_url, "sk-b") == []
        erased = httpx.delete(
            server.base_url + f"/v1/audio/voices/{voice['id']}", headers=bearer("sk-new")
        )
        assert erased.status_code == 200


def test_with_auth_disabled_uploads_are_off_unless_explicitly_shared(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    settings = ServerSettings(voices_dir=tmp_path / "voices", auth_disabled=True)
    with LiveServer(StandInEngine(variant="Base"), settings, ApiKeys(disabled=True)) as server:
        refused = upload(server.base_url, recording(), None)
        assert refused.status_code == 404
        assert "auth is disabled" in refused.json()["error"]["message"]
        assert uploaded_voice_ids(server.base_url, None) == []
    assert "voice uploads are off: auth is disabled" in caplog.text

    caplog.clear()
    shared = ServerSettings(
        voices_dir=tmp_path / "voices", auth_disabled=True, anonymous_voices=True
    )
    with LiveServer(StandInEngine(variant="Base"), shared, ApiKeys(disabled=True)) as server:
        assert upload(server.base_url, recording(), None).status_code == 201
    assert "EVERY caller can list, use and erase EVERY uploaded voice" in caplog.text


def test_leftovers_of_an_upload_killed_mid_way_are_gone_after_a_restart(tmp_path):
    voices_dir = tmp_path / "voices"
    store = LocalVoiceStore(voices_dir)
    kept = store.create(
        pcm=np.full(24000, 0.1, dtype=np.float32),
        sample_rate=24000,
        name="kept",
        transcript="t",
        language="auto",
        owner="tenant-a",
        consent_statement="yes",
        prompt=b"prompt",
    )
    # What a kill leaves: the old layout (audio first) and the new one (profile first).
    for name, files in (
        (".voice_00000000000000aa.tmp", ["reference.wav"]),
        (".voice_00000000000000bb.tmp", ["profile.json", "reference.wav"]),
    ):
        (voices_dir / name).mkdir()
        for file in files:
            (voices_dir / name / file).write_bytes(b"partial")

    settings = ServerSettings(voices_dir=voices_dir)
    with LiveServer(
        StandInEngine(variant="Base"), settings, ApiKeys(("tenant-a: sk-a",))
    ) as server:
        assert sorted(p.name for p in voices_dir.iterdir()) == [kept.id]
        assert uploaded_voice_ids(server.base_url, "sk-a") == [kept.id]


# The admin command, run as an operator runs it (kubectl exec ... ttsfleet voices delete).


def voices_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ttsfleet("voices", *args),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def store(tmp_path) -> LocalVoiceStore:
    store = LocalVoiceStore(tmp_path / "voices")
    for owner in ("tenant-a", "tenant-a", "tenant-b"):
        store.create(
            pcm=np.full(24000, 0.1, dtype=np.float32),
            sample_rate=24000,
            name=owner,
            transcript="t",
            language="auto",
            owner=owner,
            consent_statement="yes",
            prompt=b"prompt",
        )
    return store


def test_erasing_a_tenant_removes_its_voices_and_upload_leftovers_only(store):
    a_voices = [v.id for v in store.list("tenant-a")]
    b_voices = [v.id for v in store.list("tenant-b")]
    leftover = store.root / ".voice_00000000000000cc.tmp"
    leftover.mkdir()
    (leftover / "profile.json").write_text(json.dumps({"owner": "tenant-a"}))
    (leftover / "reference.wav").write_bytes(b"partial")

    result = voices_cli("delete", "--owner", "tenant-a", "--voices-dir", str(store.root))
    assert result.returncode == 0, result.stderr
    for voice_id in a_voices:
        assert f"erased voice {voice_id} (owner tenant-a)" in result.stdout
    assert "erased upload leftover voice_00000000000000cc (owner tenant-a)" in result.stdout
    assert sorted(p.name for p in store.root.iterdir()) == b_voices

    again = voices_cli("delete", "--owner", "tenant-a", "--voices-dir", str(store.root))
    assert again.returncode == 1 and "nothing to erase" in again.stderr


def test_erasing_one_voice_by_id_whoever_owns_it(store):
    voice = store.list("tenant-b")[0]
    # The directory from the server's own setting, as in the pod.
    result = voices_cli("delete", "--id", voice.id, env={"TTSFLEET_VOICES_DIR": str(store.root)})
    assert result.returncode == 0, result.stderr
    assert f"erased voice {voice.id} (owner tenant-b)" in result.stdout
    assert not (store.root / voice.id).exists()
    assert len(store.list(None)) == 2

    unknown = voices_cli("delete", "--id", voice.id, "--voices-dir", str(store.root))
    assert unknown.returncode == 1 and f"no voice {voice.id!r}" in unknown.stderr


def test_bad_erasure_arguments_exit_2(tmp_path):
    assert (
        voices_cli("delete", "--voices-dir", str(tmp_path)).returncode == 2
    )  # neither --owner nor --id
    assert (
        voices_cli(
            "delete", "--owner", "a", "--id", "voice_0", "--voices-dir", str(tmp_path)
        ).returncode
        == 2
    )
    missing = voices_cli("delete", "--owner", "a", "--voices-dir", str(tmp_path / "absent"))
    assert missing.returncode == 2 and "no voices directory" in missing.stderr
