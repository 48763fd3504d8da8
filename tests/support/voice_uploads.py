"""Voice uploads for tests: recordings, hostile files, and the upload call itself."""

from __future__ import annotations

import io
import struct

import httpx
import numpy as np
import soundfile

DAY = 86_400.0  # seconds: voice retention is set in days

UPLOAD_FIELDS = {"transcript": "Hello, this is my voice.", "consent": "true", "name": "Alice"}


def recording(seconds=2.0, rate=16000, fmt="WAV", amplitude=0.3, channels=1) -> bytes:
    """A tone of `seconds` at `rate`, encoded as `fmt`."""
    t = np.arange(int(seconds * rate)) / rate
    tone = (amplitude * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    out = io.BytesIO()
    soundfile.write(out, np.stack([tone] * channels, axis=1), rate, format=fmt)
    return out.getvalue()


def silent_flac(samples: int, rate: int = 8000) -> bytes:
    """A FLAC of `samples` zeros: silence compresses to almost nothing, so a
    small upload declares (and holds) hours of audio."""
    out = io.BytesIO()
    block = np.zeros(1 << 20, dtype=np.int16)
    with soundfile.SoundFile(
        out, "w", samplerate=rate, channels=1, format="FLAC", subtype="PCM_16"
    ) as f:
        for start in range(0, samples, len(block)):
            f.write(block[: min(len(block), samples - start)])
    return out.getvalue()


def with_declared_samples(flac: bytes, total: int) -> bytes:
    """The FLAC with STREAMINFO's total-samples field set to `total` (0: unknown):
    a header that lies about how much audio follows."""
    assert flac[:4] == b"fLaC" and flac[4] & 0x7F == 0, "STREAMINFO must be the first block"
    out = bytearray(flac)
    # STREAMINFO starts at byte 8; its total samples are the low 36 bits of bytes 13-17.
    at = 8 + 13
    out[at] = (out[at] & 0xF0) | ((total >> 32) & 0x0F)
    out[at + 1 : at + 5] = struct.pack(">I", total & 0xFFFFFFFF)
    return bytes(out)


def bearer(key: str | None) -> dict:
    return {"Authorization": f"Bearer {key}"} if key else {}


def upload(
    base_url: str, audio: bytes, key: str | None, filename="me.wav", timeout=60, **fields
) -> httpx.Response:
    return httpx.post(
        base_url + "/v1/audio/voices",
        files={"audio": (filename, audio, "application/octet-stream")},
        data={**UPLOAD_FIELDS, **fields},
        headers=bearer(key),
        timeout=timeout,
    )


def uploaded_voice_ids(base_url: str, key: str | None) -> list[str]:
    response = httpx.get(base_url + "/v1/audio/voices", headers=bearer(key))
    response.raise_for_status()
    return [v["id"] for v in response.json()["data"] if v["type"] == "uploaded"]
