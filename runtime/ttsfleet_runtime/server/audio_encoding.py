"""PCM from the engine -> the bytes of each response format.

The engine gives each request's audio in the sample format `sample_format` names for
its response format: int16 for all but Opus (made on the device, so the bytes are
only copied here), float32 for Opus, which libopus encodes from float.

Whole files carry exact sizes in their headers. Streamed responses are encoded
chunk by chunk as audio arrives:
- wav: a 44-byte header with "unknown" (0xFFFFFFFF) sizes, then s16le samples;
  players and libsndfile read such a stream to its end;
- pcm: raw s16le mono at the model's sample rate;
- mp3: lameenc, whose frames are self-contained;
- opus: Ogg Opus through libsndfile (the `soundfile` wheel bundles one built
  with it); Ogg pages are written front to back, so they can be sent as made.
flac is whole-file only: libsndfile patches STREAMINFO at close, and a FLAC
stream without its totals is refused by libsndfile-based readers.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from ..engine.api import AudioChunk, SampleFormat, to_float32, to_s16le

CONTENT_TYPES = {
    "wav": "audio/wav",
    "pcm": "audio/pcm",  # raw s16le mono at the model's sample rate
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
}
STREAMABLE = ("wav", "pcm", "mp3", "opus")

# libsndfile (container, subtype) for the formats it writes for us.
_SNDFILE_FORMATS = {"flac": ("FLAC", "PCM_16"), "opus": ("OGG", "OPUS")}
MP3_BITRATE_KBPS = 64

_UNKNOWN_SIZE = 0xFFFFFFFF


def sample_format(fmt: str) -> SampleFormat:
    """The samples the engine should give for response format `fmt`."""
    return "f32" if fmt == "opus" else "s16"


def supported_formats() -> tuple[str, ...]:
    """The response formats this process can really produce."""
    formats = ["wav", "pcm"]
    try:
        import lameenc  # noqa: F401

        formats.append("mp3")
    except ImportError:
        pass
    try:
        import soundfile
    except OSError:  # no libsndfile on this system
        return tuple(formats)
    for name, (container, subtype) in _SNDFILE_FORMATS.items():
        if subtype in soundfile.available_subtypes(container):
            formats.append(name)
    return tuple(formats)


def wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    """A PCM s16le mono WAV header; `data_bytes=None` when streaming."""
    data_size = _UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff_size = _UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", data_size)
    )


def _mp3_encoder(sample_rate: int):
    import lameenc

    encoder = lameenc.Encoder()
    encoder.set_bit_rate(MP3_BITRATE_KBPS)
    encoder.set_in_sample_rate(sample_rate)
    encoder.set_channels(1)
    encoder.set_quality(5)
    return encoder


class _AppendOnlySink(io.RawIOBase):
    """A write-only file whose bytes are taken (sent) as libsndfile makes them."""

    def __init__(self):
        self._new = bytearray()
        self._pos = 0

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        return 0

    def write(self, b) -> int:
        # Ogg is written front to back; a write elsewhere would be a bug here.
        self._new += bytes(b)
        self._pos += len(b)
        return len(b)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._pos  # libsndfile only asks where it is

    def tell(self) -> int:
        return self._pos

    def take(self) -> bytes:
        out = bytes(self._new)
        self._new = bytearray()
        return out


class StreamEncoder:
    """Encode one utterance as it arrives: `encode(chunk)` per chunk, then `finish()`."""

    def __init__(self, fmt: str, sample_rate: int):
        if fmt not in STREAMABLE:
            raise ValueError(f"{fmt!r} cannot be streamed; streamable: {', '.join(STREAMABLE)}")
        self.format = fmt
        self.content_type = CONTENT_TYPES[fmt]
        self.sample_rate = sample_rate
        self._started = False
        self._mp3 = _mp3_encoder(sample_rate) if fmt == "mp3" else None
        self._sink = self._ogg = None
        if fmt == "opus":
            import soundfile

            self._sink = _AppendOnlySink()
            self._ogg = soundfile.SoundFile(
                self._sink, "w", samplerate=sample_rate, channels=1, format="OGG", subtype="OPUS"
            )

    def encode(self, chunk: AudioChunk) -> bytes:
        if self._ogg is not None:
            self._ogg.write(chunk.float32())
            return self._sink.take()
        samples = chunk.s16le()
        if self._mp3 is not None:
            return bytes(self._mp3.encode(samples))
        if self.format == "wav" and not self._started:
            self._started = True
            return wav_header(self.sample_rate, None) + samples
        return samples

    def finish(self) -> bytes:
        if self._ogg is not None:
            self._ogg.close()
            return self._sink.take()
        if self._mp3 is not None:
            return bytes(self._mp3.flush())
        if self.format == "wav" and not self._started:
            self._started = True
            return wav_header(self.sample_rate, 0)
        return b""


def encode_file(pcm: np.ndarray, sample_rate: int, fmt: str) -> bytes:
    """A complete file of a whole utterance, with exact sizes in its header."""
    if fmt == "pcm":
        return to_s16le(pcm)
    if fmt == "wav":
        data = to_s16le(pcm)
        return wav_header(sample_rate, len(data)) + data
    if fmt == "mp3":
        encoder = _mp3_encoder(sample_rate)
        return bytes(encoder.encode(to_s16le(pcm))) + bytes(encoder.flush())
    if fmt in _SNDFILE_FORMATS:
        import soundfile

        container, subtype = _SNDFILE_FORMATS[fmt]
        out = io.BytesIO()
        # int16 samples go in as they are (FLAC's PCM_16 keeps them exactly).
        samples = pcm if pcm.dtype == np.int16 else to_float32(pcm)
        soundfile.write(out, samples, sample_rate, format=container, subtype=subtype)
        return out.getvalue()
    raise ValueError(f"unknown response format {fmt!r}")
