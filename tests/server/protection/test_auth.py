"""API keys: required on /v1, never on health and metrics; no keys, no start."""

from __future__ import annotations

import logging

import httpx
import pytest

from support.live_server import OTHER_KEY, LiveServer, metric_value
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.auth import ApiKeys, key_id
from ttsfleet_runtime.server.serve import ConfigError, load_api_keys
from ttsfleet_runtime.settings import ServerSettings


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
    assert (
        httpx.get(
            server.base_url + "/v1/models", headers={"Authorization": f"Bearer {OTHER_KEY}"}
        ).status_code
        == 200
    )


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


def test_a_rotated_keys_file_is_picked_up_on_the_next_request(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("old-key\n")
    keys = ApiKeys(keys_file=keys_file)
    assert keys.authenticate("Bearer old-key").startswith("key_")
    keys_file.write_text("# rotated\nnew-key\n")
    assert keys.authenticate("Bearer new-key").startswith("key_")
    with pytest.raises(errors.ApiError):
        keys.authenticate("Bearer old-key")


def test_caller_ids_do_not_reveal_keys():
    keys = ApiKeys(("super-secret-key",))
    caller = keys.authenticate("Bearer super-secret-key")
    assert "secret" not in caller and caller.startswith("key_")


def test_keys_are_named_by_tenant_and_unnamed_keys_keep_their_derived_id(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text("\ufeff# tenants\ntenant-a: sk-a1\n\n  tenant-a:\tsk-a2  \nsk-lone\n")
    keys = ApiKeys(keys_file=keys_file)
    assert keys.authenticate("Bearer sk-a1") == keys.authenticate("Bearer sk-a2") == "tenant-a"
    assert keys.authenticate("Bearer sk-lone") == key_id("sk-lone")


def test_a_bom_does_not_disable_the_first_key(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_bytes("first-key\nsecond-key\n".encode("utf-8-sig"))
    keys = ApiKeys(keys_file=keys_file)
    assert keys.authenticate("Bearer first-key") == key_id("first-key")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"tenant-a: sk-1\n\xff\xfe bad bytes\n", "not UTF-8"),
        (b"tenant-a: sk-1 extra-field\n", "keys:1: expected 'KEY' or 'TENANT: KEY'"),
        # Two keys on a line (or a name without its colon) must not make a key a tenant name.
        (b"sk-0 sk-1\n", "keys:1: expected 'KEY' or 'TENANT: KEY'"),
        (b"key_abc: sk-1\n", "reserved"),
        (b"tenant-a: sk-1\ntenant-b: sk-1\n", "keys:2: a key listed for two tenants"),
        (b"bad/name: sk-1\n", "a tenant name is"),
    ],
)
def test_an_unusable_keys_file_refuses_to_start_and_names_the_line_not_the_key(
    tmp_path, content, reason
):
    keys_file = tmp_path / "keys"
    keys_file.write_bytes(content)
    with pytest.raises(ConfigError, match="API keys") as refused:
        load_api_keys(ServerSettings(api_keys_file=keys_file))
    assert reason in str(refused.value)
    assert "sk-1" not in str(refused.value)


def rewrite(path, content: bytes) -> None:
    """Replace a keys file the way a Secret rotation does: a new file renamed over it."""
    fresh = path.with_suffix(".new")
    fresh.write_bytes(content)
    fresh.replace(path)


def test_keys_file_reload_revokes_at_once_and_a_bad_file_keeps_the_last_good_keys(
    make_engine, tmp_path, caplog
):
    caplog.set_level(logging.INFO)
    keys_file = tmp_path / "keys"
    keys_file.write_text("alice: sk-alice\nbob: sk-bob\n")
    with LiveServer(make_engine(), ServerSettings(), ApiKeys(keys_file=keys_file)) as server:

        def status(key):
            return httpx.get(
                server.base_url + "/v1/models", headers={"Authorization": f"Bearer {key}"}
            ).status_code

        errors_metric = "ttsfleet_auth_keys_reload_errors_total"
        assert status("sk-alice") == status("sk-bob") == 200
        # Revoking bob works from the very next request.
        rewrite(keys_file, b"alice: sk-alice\n")
        assert (status("sk-bob"), status("sk-alice")) == (401, 200)

        # A broken file (not UTF-8, trying to add a key) is rejected as a whole, never a 500;
        # the keys stay as they were, and the rejection is logged once and counted.
        rewrite(keys_file, b"alice: sk-alice\ncarol: sk-carol-\xff\n")
        assert [status("sk-alice"), status("sk-alice"), status("sk-bob")] == [200, 200, 401]
        assert metric_value(server.base_url, errors_metric) == 1
        rejected = [
            r for r in caplog.records if r.getMessage().startswith("api keys file rejected")
        ]
        assert len(rejected) == 1 and "not UTF-8" in rejected[0].reason

        # A missing file (mid-swap) keeps the keys too; the next good version applies.
        keys_file.unlink()
        assert status("sk-alice") == 200
        assert metric_value(server.base_url, errors_metric) == 2
        rewrite(keys_file, b"\xef\xbb\xbfcarol: sk-carol\n")
        assert (status("sk-carol"), status("sk-alice")) == (200, 401)
        assert metric_value(server.base_url, errors_metric) == 2
    # Secrets never in logs: neither in messages nor in their extra fields.
    assert not [r for r in caplog.records if "sk-" in str(vars(r))]
