"""The API keys runtime pods check: the spec's Secret, or one the operator creates.

Auth is on unless a spec says `runtime.auth: Disabled`. With `runtime.apiKeysSecret`
the pods mount that Secret. Without it the operator creates `<name>-api-keys` once,
holding one random key for the tenant `default`, owned by the TTSService
(garbage-collected with it) and never rewritten: the key stays the same across passes
and operator restarts, and whoever may edit Secrets can add or rotate keys in it (a key
added as `default: KEY` keeps the tenant's voices when the first is removed). The key is
never logged nor printed: the operator only creates the Secret, it never reads one, and
`ttsfleet render` does not show it.
"""

from __future__ import annotations

import secrets

from ttsfleet_operator.render import names
from ttsfleet_operator.render.metadata import child_metadata
from ttsfleet_operator.tts_service import TTSService

# Where the keys Secret is mounted; its key `keys` holds one API key a line.
API_KEYS_DIR = "/etc/ttsfleet/api-keys"
API_KEYS_SECRET_KEY = "keys"
# The generated key's tenant: named, not derived from the key, so a rotated key keeps the
# voices (runtime auth.py: a keys-file line is `KEY` or `TENANT: KEY`).
GENERATED_TENANT = "default"
# A recognisable prefix (secret scanners, "which key is this?") and 256 random bits.
KEY_PREFIX = "ttsf_"
KEY_BYTES = 32


def mounted_secret_name(service: TTSService) -> str | None:
    """The Secret whose keys the pods accept; None when the spec turns auth off."""
    runtime = service.spec.runtime
    if runtime.auth == "Disabled":
        return None
    return runtime.api_keys_secret or names.api_keys_secret_name(service.name)


def generated_secret_name(service: TTSService) -> str | None:
    """The Secret the operator creates for this service, if it creates one."""
    runtime = service.spec.runtime
    if runtime.auth == "Disabled" or runtime.api_keys_secret:
        return None
    return names.api_keys_secret_name(service.name)


def auth_settings(service: TTSService) -> dict[str, object]:
    """The runtime's auth settings (by catalogue name): the keys file, or auth off
    because the spec says so."""
    if mounted_secret_name(service) is None:
        return {"auth_disabled": True}
    return {"api_keys_file": f"{API_KEYS_DIR}/{API_KEYS_SECRET_KEY}"}


def new_api_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(KEY_BYTES)


def render_api_keys_secret(service: TTSService, key: str) -> dict:
    """The generated Secret, holding `key` of the tenant `default` as its keys file."""
    name = generated_secret_name(service)
    if name is None:
        raise ValueError(f"TTSService {service.name} brings its own keys or turns auth off")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(service, name, "api-keys"),
        "type": "Opaque",
        "stringData": {API_KEYS_SECRET_KEY: f"{GENERATED_TENANT}: {key}\n"},
    }
