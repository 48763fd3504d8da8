"""Decompression bombs: a small upload that declares (or holds) hours of audio is refused
from its header or within a bounded decode, and the server's memory stays flat, also
for several at once. Memory is the real `ttsfleet serve` process's, read from /proc."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
from pathlib import Path

import numpy as np
import pytest
import soundfile

from support.runtime import RuntimeProcess
from support.voice_uploads import recording, silent_flac, upload, with_declared_samples
from ttsfleet_runtime.server import errors
from ttsfleet_runtime.server.reference_audio import ReferenceDecoder, ReferenceLimits, decode_mono

# 40 M samples at 8 kHz: 5000 s of silence in about 120 kB of FLAC; a whole-file
# float32 decode of one is 160 MB, and the old code made three copies.
BOMB_SAMPLES = 40_000_000
MEMORY_BOUND_BYTES = 200 * 1024 * 1024
LIMITS = ReferenceLimits(min_s=1.0, max_s=30.0)


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return silent_flac(BOMB_SAMPLES)


@pytest.fixture(scope="module")
def serve_process(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("bombs")
    process = RuntimeProcess(
        workdir,
        None,  # the stand-in Base engine: uploads need a model that clones
        "--voices-dir",
        str(workdir / "voices"),
        "--anonymous-voices",
        "on",
        "--max-voice-upload-bytes",
        str(1024 * 1024),
    )
    try:
        yield process.wait_ready()
    finally:
        process.stop()


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def peak_growth(pid: int, action) -> int:
    """Bytes the process's peak resident set rose above its resident set while `action` ran."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before = _status_kb(pid, "VmRSS")
    action()
    return (_status_kb(pid, "VmHWM") - before) * 1024


def test_the_bomb_declares_thousands_of_seconds_in_a_small_file(bomb):
    assert len(bomb) < 400 * 1024
    assert with_declared_samples(bomb, 0) != bomb


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [(None, "this file declares it lasts 5000.00"), (0, "holds more than it declares")],
    ids=["honest-header", "header-says-unknown-length"],
)
def test_bombs_get_a_400_and_the_server_memory_stays_flat(serve_process, bomb, declared, fragment):
    audio = bomb if declared is None else with_declared_samples(bomb, declared)
    responses = []

    def three_at_once():
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            responses.extend(
                pool.map(lambda _: upload(serve_process.base, audio, None, "bomb.flac"), range(3))
            )

    grew = peak_growth(serve_process.process.pid, three_at_once)
    assert grew < MEMORY_BOUND_BYTES, f"peak RSS grew {grew / 2**20:.0f} MiB"
    for response in responses:
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "audio"
        assert fragment in response.json()["error"]["message"]
    # A real voice is still accepted afterwards.
    assert upload(serve_process.base, recording(), None).status_code == 201


def test_a_header_that_understates_the_length_is_decoded_only_as_far_as_it_says():
    # libsndfile stops at the declared length: the rest of the lie is never decoded.
    honest = recording(seconds=40, rate=8000, fmt="FLAC")
    mono, rate = decode_mono(with_declared_samples(honest, 2 * 8000), LIMITS)
    assert len(mono) == 2 * 8000 and rate == 8000


@pytest.mark.parametrize(
    ("audio", "fragment"),
    [
        (recording(seconds=2, rate=4000), "sample rate 4000 Hz is not supported"),
        (
            recording(seconds=1.5, rate=655_350, fmt="FLAC"),
            "sample rate 655350 Hz is not supported",
        ),
        (recording(seconds=2, channels=9, fmt="WAV"), "9 channels"),
        (b"RIFF\x00\x00garbage", "could not decode the audio (Format not recognised"),
    ],
    ids=["rate-too-low", "rate-too-high", "too-many-channels", "garbage"],
)
def test_headers_out_of_bounds_are_refused_before_decoding(audio, fragment):
    with pytest.raises(errors.ApiError) as refused:
        decode_mono(audio, LIMITS)
    assert fragment in refused.value.message
    assert "0x" not in refused.value.message  # no object addresses in messages


def test_uploads_decode_a_bounded_number_at_a_time():
    decoder = ReferenceDecoder(LIMITS, 24000, concurrency=2, slot_wait_s=0.2)

    async def while_two_decode():
        async with decoder.slot(), decoder.slot():
            with pytest.raises(errors.ApiError) as refused:
                await decoder.decode(recording())
        return refused.value, await decoder.decode(recording())

    refused, decoded = asyncio.run(while_two_decode())
    assert (refused.status, refused.code, refused.headers()) == (
        429,
        "queue_full",
        {"Retry-After": "1"},
    )
    assert len(decoded) == 2 * 24000


def _float_wav(peak: float) -> bytes:
    """2 s of a tone peaking at `peak` as a 32-bit float WAV (which keeps samples past 1)."""
    t = np.arange(32_000) / 16_000
    out = io.BytesIO()
    tone = (peak * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    soundfile.write(out, tone, 16_000, format="WAV", subtype="FLOAT")
    return out.getvalue()


@pytest.mark.parametrize("peak", [9.0, 1e30], ids=["past-the-bound", "scaled-1e30"])
def test_a_float_recording_far_past_full_scale_is_refused(peak):
    with pytest.raises(errors.ApiError) as refused:
        decode_mono(_float_wav(peak), LIMITS)
    assert refused.value.param == "audio" and "times full scale" in refused.value.message


def test_a_float_recording_a_little_past_full_scale_is_taken():
    mono, _ = decode_mono(_float_wav(1.5), LIMITS)
    assert abs(float(abs(mono).max()) - 1.5) < 1e-3
