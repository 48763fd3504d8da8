"""API keys: required on /v1, never on health and metrics; no keys, no start."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from support.live_server import OTHER_KEY
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.server.serve import ConfigError, load_api_keys
from ttsfleet_runtime.server.settings import ServerSettings


@pytest.mark.parametrize(
    ("headers", "fragment"),
    [
        ({}, "missing API key"),
        ({"Authorization": "Bearer nope"}, "invalid API key"),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "malformed Authorization"),
        ({"Authorization": "Bearer"}, "malformed Authorization"),
    ],
)
def test_v1_without_a_valid_key_is_401(server, headers, fragment):
    for path in ("/v1/models", "/v1/audio/voices"):
        response = httpx.get(server.base_url + path, headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "invalid_api_key"
        assert fragment in response.json()["error"]["message"]


def test_unauthenticated_speech_is_refused_before_the_body_is_parsed(server):
    response = httpx.post(server.base_url + "/v1/audio/speech", content=b"not json")
    assert response.status_code == 401


def test_every_configured_key_works(server):
    assert httpx.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {OTHER_KEY}"}).status_code == 200


def test_health_and_metrics_need_no_key(server):
    assert httpx.get(server.base_url + "/health/live").status_code == 200
    assert httpx.get(server.base_url + "/health/ready").json() == {"status": "ready"}
    assert httpx.get(server.base_url + "/metrics").status_code == 200


def test_server_refuses_to_start_without_keys_unless_auth_is_disabled():
    with pytest.raises(ConfigError, match="TTSFLEET_AUTH=disabled"):
        load_api_keys(ServerSettings())
    assert load_api_keys(ServerSettings(auth_disabled=True)).disabled


def test_keys_and_disabled_auth_together_is_a_configuration_error():
    with pytest.raises(ConfigError, match="choose one"):
        load_api_keys(ServerSettings(auth_disabled=True, api_keys=("k",)))


def test_missing_or_empty_keys_file_is_a_configuration_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_api_keys(ServerSettings(api_keys_file=tmp_path / "absent"))
    empty = tmp_path / "keys"
    empty.write_text("# no keys yet\n\n")
    with pytest.raises(ConfigError, match="no API keys"):
        load_api_keys(ServerSettings(api_keys_file=empty))


def test_a_rotated_keys_file_is_picked_up(tmp_path, monkeypatch):
    keys_file = tmp_path / "keys"
    keys_file.write_text("old-key\n")
    keys = ApiKeys(keys_file=keys_file)
    assert keys.authenticate("Bearer old-key").startswith("key_")
    keys_file.write_text("# rotated\nnew-key\n")
    os.utime(keys_file, (time.time() + 10, time.time() + 10))
    monkeypatch.setattr(ApiKeys, "RECHECK_EVERY_S", 0.0)
    assert keys.authenticate("Bearer new-key").startswith("key_")
    with pytest.raises(errors.ApiError):
        keys.authenticate("Bearer old-key")


def test_caller_ids_do_not_reveal_keys():
    keys = ApiKeys(("super-secret-key",))
    caller = keys.authenticate("Bearer super-secret-key")
    assert "secret" not in caller and caller.startswith("key_")
