"""Uploaded reference audio, probed and decoded without trusting the file.

A compressed file can declare (and hold) far more audio than its size suggests:
a 1 MB FLAC of silence holds hours at 8 kHz, which a whole-file decode turns into
gigabytes of float32. So an upload is handled in this order, each step refusing
with a 400 that names the reason:

1. the container header is read (`soundfile.info`, no samples decoded) and the
   declared sample rate, channel count and duration are checked;
2. the samples are decoded in blocks and mixed to mono block by block, with a
   running cap at the longest allowed duration, in case the header lies (a FLAC
   may declare 0, "unknown", samples);
3. the mono signal is checked (finite, within `MAX_PEAK` of full scale, not
   silent) and resampled to the model's rate (soxr), so what is stored is at
   most `max_s` seconds of mono audio at the model's rate whatever was sent.

Its transcript is checked against the decoded length (`check_transcript`): a
transcript that no one could say in that time is not this recording's.

`ReferenceDecoder` runs step 1-3 off the event loop and at most
`MAX_CONCURRENT_DECODES` at a time, so parallel uploads cannot multiply the
memory one decode may take.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io

import numpy as np
import soundfile

from . import errors

DECODABLE = "WAV, FLAC, OGG (Vorbis/Opus) or MP3"
# Beyond studio rates nothing is gained for a voice reference; the cap bounds
# the samples one second of upload may expand to.
MAX_SAMPLE_RATE = 192_000
MIN_SAMPLE_RATE = 8_000
MAX_CHANNELS = 8
# Frames decoded at a time: 64 Ki frames x 8 channels x float32 = 2 MiB.
BLOCK_FRAMES = 64 * 1024
# Uploads decoded at once per process; more wait for a slot (up to the wait below).
MAX_CONCURRENT_DECODES = 2
DECODE_SLOT_WAIT_S = 10.0
# libsndfile's "length unknown" (e.g. a FLAC whose STREAMINFO says 0 samples).
_UNKNOWN_FRAMES = 2**63 - 1
SILENCE_PEAK = 1e-4
# A float file may run past full scale (1.0) after mixing or gain; a recording 8 times
# over it (+18 dBFS) is a scaled or corrupt file, and far beyond it (x1e20) the speaker
# encoder's power spectrum overflows into a voice that can never be spoken.
MAX_PEAK = 8.0
# The fastest read speech is about 20 characters a second (some 300 words a minute in
# English; scripts that write a syllable a character, such as Chinese, need fewer).
# Twice that, plus a short phrase's worth for clips of a second or two, is the most a
# transcript may hold for its recording: beyond it the text is not what was said.
MAX_TRANSCRIPT_CHARS_PER_S = 40
TRANSCRIPT_ALLOWANCE_CHARS = 20


@dataclasses.dataclass(frozen=True)
class ReferenceLimits:
    min_s: float
    max_s: float
    max_sample_rate: int = MAX_SAMPLE_RATE
    max_channels: int = MAX_CHANNELS


def _refuse(message: str) -> errors.ApiError:
    return errors.invalid_request(message, param="audio")


def _duration_refusal(
    limits: ReferenceLimits, duration: float, qualifier: str = ""
) -> errors.ApiError:
    return _refuse(
        f"reference audio must last {limits.min_s:g} to {limits.max_s:g} seconds; "
        f"this {qualifier}lasts {duration:.2f}"
    )


def _open_error(exc: Exception) -> errors.ApiError:
    # libsndfile's message names the file object ("Error opening <_io.BytesIO
    # object at 0x...>: Format not recognised."): keep only the reason.
    reason = str(exc).rsplit(": ", 1)[-1].strip() or "unreadable"
    return _refuse(f"could not decode the audio ({reason}); send {DECODABLE}")


class _ForwardReader(soundfile.SoundFile):
    """Reads block after block without seeking. soundfile seeks after every read,
    which fails at the end of a file whose length is unknown (a FLAC declaring 0
    samples); this reader never seeks and stops at the first empty block."""

    def seekable(self) -> bool:
        return False


def probe(data: bytes, limits: ReferenceLimits):
    """The header's description of the audio (no samples decoded), or a 400."""
    if not data:
        raise _refuse("the audio file is empty")
    try:
        info = soundfile.info(io.BytesIO(data))
    except Exception as exc:  # libsndfile: "Format not recognised" etc.
        raise _open_error(exc) from None
    if not MIN_SAMPLE_RATE <= info.samplerate <= limits.max_sample_rate:
        raise _refuse(
            f"sample rate {info.samplerate} Hz is not supported; "
            f"send {MIN_SAMPLE_RATE} to {limits.max_sample_rate} Hz"
        )
    if not 1 <= info.channels <= limits.max_channels:
        raise _refuse(f"{info.channels} channels; send 1 to {limits.max_channels}")
    if 0 < info.frames < _UNKNOWN_FRAMES:
        declared = info.frames / info.samplerate
        if declared > limits.max_s:
            raise _duration_refusal(limits, declared, "file declares it ")
    return info


def decode_mono(data: bytes, limits: ReferenceLimits) -> tuple[np.ndarray, int]:
    """Mono float32 samples at the file's rate, decoded in blocks, or a 400."""
    info = probe(data, limits)
    rate = info.samplerate
    # One block past the cap is enough to know the audio is too long.
    cap = int(limits.max_s * rate) + 1
    blocks: list[np.ndarray] = []
    decoded = 0
    try:
        with _ForwardReader(io.BytesIO(data)) as f:
            while len(block := f.read(BLOCK_FRAMES, dtype="float32", always_2d=True)):
                blocks.append(block.mean(axis=1))
                decoded += len(block)
                if decoded > cap:
                    lie = "file holds more than it declares and "
                    raise _duration_refusal(limits, decoded / rate, lie)
    except errors.ApiError:
        raise
    except Exception as exc:  # a corrupt frame mid-file
        raise _open_error(exc) from None
    mono = np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.float32)
    duration = len(mono) / rate
    if duration < limits.min_s or duration > limits.max_s:
        raise _duration_refusal(limits, duration)
    if not np.all(np.isfinite(mono)):
        raise _refuse("the audio contains non-finite samples")
    peak = float(np.abs(mono).max())
    if peak > MAX_PEAK:
        raise _refuse(
            f"the audio peaks at {peak:.3g} times full scale; send samples within -1 to 1 "
            "(normalise the recording)"
        )
    if peak < SILENCE_PEAK:
        raise _refuse("the reference audio is silent")
    return mono, rate


def check_transcript(transcript: str, seconds: float, param: str = "transcript") -> None:
    """A 400 on `param` when the transcript is blank or longer than anyone says in
    `seconds` (runs of whitespace count as one character)."""
    spoken = " ".join(transcript.split())
    if not spoken:
        raise errors.invalid_request(
            "the transcript is blank: give the words said in the recording", param=param
        )
    most = int(MAX_TRANSCRIPT_CHARS_PER_S * seconds) + TRANSCRIPT_ALLOWANCE_CHARS
    if len(spoken) > most:
        raise errors.invalid_request(
            f"the transcript has {len(spoken)} characters for {seconds:.1f} s of audio, more "
            f"than anyone says in that time (at most {most}); send the recording's own words",
            param=param,
        )


def resample(mono: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Band-limited resampling (libsoxr, high quality) of a mono float32 signal."""
    if from_rate == to_rate:
        return mono.astype(np.float32, copy=False)
    import soxr

    out = soxr.resample(mono, from_rate, to_rate, quality="HQ")
    # A full-scale input can overshoot a little after the low-pass.
    return np.clip(out, -1.0, 1.0).astype(np.float32, copy=False)


def decode_reference(data: bytes, limits: ReferenceLimits, target_rate: int) -> np.ndarray:
    """Mono float32 samples at `target_rate`, checked, or a 400 saying what is wrong."""
    mono, rate = decode_mono(data, limits)
    return resample(mono, rate, target_rate)


class ReferenceDecoder:
    """Decodes uploads off the event loop, a bounded number at a time."""

    def __init__(
        self,
        limits: ReferenceLimits,
        target_rate: int,
        concurrency: int = MAX_CONCURRENT_DECODES,
        slot_wait_s: float = DECODE_SLOT_WAIT_S,
    ):
        self.limits = limits
        self.target_rate = target_rate
        self.slot_wait_s = slot_wait_s
        # Created without a loop; bound to the server's loop on first use.
        self._slots = asyncio.Semaphore(concurrency)

    @contextlib.asynccontextmanager
    async def slot(self):
        """One of the decode slots, or 429 when none frees up in time."""
        try:
            await asyncio.wait_for(self._slots.acquire(), self.slot_wait_s)
        except TimeoutError:
            raise errors.queue_full(self.slot_wait_s) from None
        try:
            yield
        finally:
            self._slots.release()

    async def decode(self, data: bytes) -> np.ndarray:
        async with self.slot():
            return await asyncio.to_thread(decode_reference, data, self.limits, self.target_rate)
