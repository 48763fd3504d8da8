"""`--voice-retention-days` is bounded at start-up: 0 keeps voices, an hour to a century
erases them that long after upload, and what lies outside is refused with a sentence
before the server starts (1e-12 days erased every upload at once; 3,000,000 days, past
the year 9999, made every upload fail with a 500)."""

from __future__ import annotations

import argparse

import pytest

from support.live_server import API_KEY, LiveServer
from support.stand_in_engine import StandInEngine
from support.voice_uploads import DAY, recording, upload, uploaded_voice_ids
from ttsfleet_runtime.cli import register
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


def serve_args(*flags: str) -> argparse.Namespace:
    """`ttsfleet-runtime serve` flags parsed as its `main` parses them, without serving."""
    parser = argparse.ArgumentParser(prog="ttsfleet-runtime")
    register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["serve", "--model", "/m", *flags])


@pytest.mark.parametrize(
    ("days", "message"),
    [
        ("1e-12", "must be at least 0.0416667 (or 0: off), got 1e-12"),
        ("0.04", "must be at least 0.0416667 (or 0: off), got 0.04"),
        ("3000000", "must be at most 36500, got 3000000.0"),
        ("1e300", "must be at most 36500, got 1e+300"),
        ("inf", "expected a finite number"),
    ],
)
def test_serve_refuses_a_retention_that_expires_at_once_or_overflows(capsys, days, message):
    with pytest.raises(SystemExit) as exit_:
        serve_args("--voice-retention-days", days)
    assert exit_.value.code == 2
    assert f"argument --voice-retention-days: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("days", ["0", "0.0416667", "36500"])
def test_serve_takes_off_and_the_bounds(days):
    args = serve_args("--voice-retention-days", days)
    assert args.voice_retention_days == float(days)


@pytest.mark.parametrize("days", [1 / 24, 36_500.0], ids=["an-hour", "a-century"])
def test_uploads_at_the_bounds_are_stored_and_listed(tmp_path, days):
    settings = ServerSettings(voices_dir=tmp_path / "voices", voice_retention_days=days)
    with LiveServer(
        StandInEngine(variant="Base", frames=10), settings, ApiKeys((API_KEY,))
    ) as live:
        created = upload(live.base_url, recording(), API_KEY)
        assert created.status_code == 201, created.text
        voice = live.runtime.voices.store.get(created.json()["id"], None)
        assert voice.expires_at == pytest.approx(voice.created_at + days * DAY)
        assert uploaded_voice_ids(live.base_url, API_KEY) == [created.json()["id"]]
