"""The playground, used in headless Chromium as a person would: enter a key,
pick a voice, type text, press Speak, hear it stream, see the time to first audio
and the words as a caption, each with its time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.chromium import Browser, chromium_missing
from support.live_server import API_KEY, SHORT_AUDIO_S, metric_value

SPEECH_ROUTE = "/v1/audio/speech/with-timestamps"  # the playground asks for the words too


# What the test types: the caption must list these words, in order.
WORDS = ["Good", "morning", "from", "the", "playground."]


def test_speak_streams_audio_and_shows_time_to_first_audio(server, tmp_path):
    missing = chromium_missing()
    if missing:
        pytest.fail(missing)
    speech_before = metric_value(
        server.base_url, "ttsfleet_requests_total", {"route": SPEECH_ROUTE, "code": "200"}
    )
    with Browser() as browser:
        page = browser.open(server.base_url + "/")
        assert page.evaluate("location.pathname") == "/playground/"
        assert page.evaluate("document.getElementById('model').textContent") == "enter an API key"

        page.click("#api-key")
        page.type(API_KEY)
        page.press("Tab", "Tab", 9)  # leaving the field saves the key and loads the voices
        page.wait_for("document.getElementById('status').dataset.state === 'ready'")
        voices = page.evaluate("[...document.querySelectorAll('#voice option')].map(o => o.value)")
        assert voices[: len(server.engine.info.speakers)] == list(server.engine.info.speakers)

        page.evaluate("document.getElementById('voice').focus()")
        page.press("ArrowDown", "ArrowDown", 40)
        assert page.evaluate("document.getElementById('voice').value") == voices[1]
        page.click("#text")
        page.select_all()
        page.type(" ".join(WORDS))
        page.click("#instructions")
        page.type("calm and warm")
        page.click("#speak")

        page.wait_for("document.getElementById('status').dataset.state === 'done'", timeout_s=60)
        ttfa = page.evaluate("document.getElementById('ttfa').textContent")
        samples = int(page.evaluate("document.getElementById('audio-seconds').dataset.samples"))
        server_timing = page.evaluate("document.getElementById('server-timing').textContent")
        caption = page.evaluate(
            "[...document.querySelectorAll('#caption span')]"
            ".map(s => [s.textContent, Number(s.dataset.start), Number(s.dataset.end)])"
        )
        shot = page.screenshot(tmp_path / "playground.png")
        if os.environ.get("TTSFLEET_SCREENSHOT_DIR"):
            (Path(os.environ["TTSFLEET_SCREENSHOT_DIR"]) / "playground.png").write_bytes(shot)
        assert page.exceptions == []

    assert ttfa.endswith(" ms") and float(ttfa.split()[0]) > 0
    assert "NaN" not in server_timing
    assert [word for word, _, _ in caption] == WORDS
    assert all(0 <= start < end <= SHORT_AUDIO_S for _, start, end in caption)
    assert [start for _, start, _ in caption] == sorted(start for _, start, _ in caption)
    assert samples == round(SHORT_AUDIO_S * 12.5) * 1920
    assert shot.startswith(b"\x89PNG") and len(shot) > 10_000
    after = metric_value(
        server.base_url, "ttsfleet_requests_total", {"route": SPEECH_ROUTE, "code": "200"}
    )
    assert after == speech_before + 1


def test_upload_a_voice_then_speak_with_it(tmp_path):
    """A Base model (the stand-in's): the page clones a recording, selects it, speaks it."""
    import base64

    from support.live_server import LiveServer
    from support.stand_in_engine import StandInEngine
    from support.voice_uploads import recording
    from ttsfleet_runtime.server.auth import ApiKeys
    from ttsfleet_runtime.settings import ServerSettings

    missing = chromium_missing()
    if missing:
        pytest.fail(missing)
    settings = ServerSettings(voices_dir=tmp_path / "voices")
    engine = StandInEngine(variant="Base", frames=10)
    wav = base64.b64encode(recording()).decode()
    with LiveServer(engine, settings, ApiKeys((API_KEY,))) as server, Browser() as browser:
        page = browser.open(server.base_url + "/")
        page.click("#api-key")
        page.type(API_KEY)
        page.press("Tab", "Tab", 9)
        page.wait_for("document.getElementById('status').dataset.state === 'ready'")
        assert page.evaluate("document.getElementById('clone').hidden") is False
        page.evaluate(
            f"""(() => {{
              const bytes = Uint8Array.from(atob("{wav}"), (c) => c.charCodeAt(0));
              const files = new DataTransfer();
              files.items.add(new File([bytes], "me.wav", {{ type: "audio/wav" }}));
              document.getElementById("clone-audio").files = files.files;
            }})()"""
        )
        page.click("#clone-transcript")
        page.type("Hello, this is my voice.")
        page.click("#clone-consent")
        page.click("#upload")
        page.wait_for("document.getElementById('clone-status').textContent.startsWith('stored')")
        voice = page.evaluate("document.getElementById('voice').value")
        assert voice.startswith("voice_") and engine.clones == 1
        page.click("#speak")
        page.wait_for("document.getElementById('status').dataset.state === 'done'", timeout_s=60)
        samples = int(page.evaluate("document.getElementById('audio-seconds').dataset.samples"))
        assert page.exceptions == []
    assert samples == 10 * 1920
