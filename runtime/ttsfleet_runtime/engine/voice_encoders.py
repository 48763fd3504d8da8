"""Voice cloning's encoder work: a reference recording -> `ClonedVoice`.

A Base checkpoint carries two encoders: the speaker encoder (model/speaker_encoder.py)
for the speaker embedding, and the speech tokenizer's encoder for the reference codes
of in-context cloning (12 Hz: speech_tokenizer/rate12/encoder.py; 25 Hz:
speech_tokenizer/rate25/encoder.py, picked by
the checkpoint's `tokenizer_type`). A 25 Hz tokenizer's decoder also needs the voice: its
x-vector and reference mel (`DecoderVoiceExtractor`) are computed for every 25 Hz
voice, with or without a transcript. `VoiceEncoders` holds both on the engine's device
and runs them for `TTSEngine.clone_voice`, from whatever thread calls it (the server's
upload workers), beside the engine loop:

- on a GPU, on a CUDA stream of its own, so an upload never waits for a decode step to
  finish, nor a decode step for an upload;
- one recording at a time (a lock): the encoders' activations at the audio rate are the
  largest transient memory cloning takes, and uploads are rare next to synthesis.

What the encoders cannot take is refused with `InvalidRequest` before any device work:
not mono, non-finite or silent samples, shorter than one codec frame, longer than
`MAX_SECONDS`; and after it, a recording whose embedding, x-vector or reference mel
is not finite (samples far past full scale overflow the encoders' spectra).
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import numpy as np
import torch

from ..model.config import TTSConfig
from ..model.speaker_encoder import load_speaker_encoder, min_samples
from ..speech_tokenizer.rate12.encoder import load_codec_encoder
from ..speech_tokenizer.rate25.encoder import DecoderVoiceExtractor, load_speech_encoder_25hz
from ..transfers import to_device, to_host
from .api import ClonedVoice, InvalidRequest
from .resampling import resample

# The loudest sample of a recording below this is silence (full scale is 1.0).
SILENT_PEAK = 1e-4
# The encoders' activations grow with the recording: at the audio rate the codec
# encoder's first layers hold 64-128 channels. Two minutes bounds that; a voice needs
# seconds.
MAX_SECONDS = 120.0
# Sample rates a recording may come at.
MIN_RATE, MAX_RATE = 8_000, 192_000


class VoiceEncoders:
    def __init__(self, checkpoint: Path, device: str):
        self.device = torch.device(device)
        self.speaker = load_speaker_encoder(checkpoint, self.device)
        tokenizer = checkpoint / "speech_tokenizer"
        self.decoder_voice: DecoderVoiceExtractor | None = None
        if TTSConfig.from_file(checkpoint / "config.json").tokenizer_rate_hz == 25:
            self.codec = load_speech_encoder_25hz(tokenizer, self.device)
            self.codec_rate = self.codec.sampling_rate
            self.decoder_voice = DecoderVoiceExtractor(tokenizer / "campplus.onnx")
        else:
            self.codec = load_codec_encoder(tokenizer, self.device)
            self.codec_rate = self.codec.config.sampling_rate
        self.speaker_rate = self.speaker.config.sample_rate
        # The shortest recording both encoders take: one codec frame, and enough mel
        # frames for the speaker encoder's widest padding.
        self.min_seconds = max(
            min_samples(self.speaker.config) / self.speaker_rate,
            self.codec.samples_per_frame / self.codec_rate,
        )
        self._lock = threading.Lock()
        self._stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        if self._stream is not None:
            # The weights were copied on the default stream.
            self._stream.wait_stream(torch.cuda.default_stream(self.device))

    def clone(
        self, audio: np.ndarray, sample_rate: int, transcript: str | None, model: str
    ) -> ClonedVoice:
        mono = self._checked(audio, sample_rate)
        if transcript is not None and not transcript.strip():
            raise InvalidRequest(
                "transcript is empty: give the recording's words, or none to clone from "
                "the speaker embedding alone",
                param="transcript",
            )
        for_speaker = torch.from_numpy(resample(mono, sample_rate, self.speaker_rate))
        at_codec_rate = (
            resample(mono, sample_rate, self.codec_rate)
            if transcript is not None or self.decoder_voice is not None
            else None
        )
        for_codec = torch.from_numpy(at_codec_rate) if transcript is not None else None
        with self._lock, self.device_scope():
            # Pinned copies (transfers.py): a pageable one would wait behind
            # the codec thread's copies in the driver's shared staging buffer.
            embedding = to_host(self.speaker.embed(to_device(for_speaker, self.device))).numpy()
            codes = None
            if for_codec is not None:
                codes = to_host(self.codec.encode(to_device(for_codec, self.device))).numpy()
        xvector = ref_mel = None
        if self.decoder_voice is not None:  # CPU work (onnxruntime): outside the lock
            xvector, ref_mel = self.decoder_voice.extract(at_codec_rate)
        computed = [embedding] + ([xvector, ref_mel] if xvector is not None else [])
        if not all(np.isfinite(part).all() for part in computed):
            # Finite samples far past full scale overflow the encoders' power spectra.
            raise InvalidRequest(
                "the reference audio gives a speaker embedding that is not finite; send a "
                "recording with samples within -1 to 1",
                param="audio",
            )
        return ClonedVoice(
            speaker_embedding=embedding,
            ref_codes=codes,
            ref_text=transcript,
            model=model,
            xvector=xvector,
            ref_mel=ref_mel,
        )

    @contextlib.contextmanager
    def device_scope(self):
        """inference_mode, on the encoders' own CUDA stream where there is one."""
        with torch.inference_mode():
            if self._stream is None:
                yield
            else:
                with torch.cuda.stream(self._stream):
                    yield

    def _checked(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        if not isinstance(sample_rate, int | np.integer) or not (
            MIN_RATE <= sample_rate <= MAX_RATE
        ):
            raise InvalidRequest(
                f"sample rate {sample_rate!r} is not supported; send {MIN_RATE} to {MAX_RATE} Hz",
                param="sample_rate",
            )
        mono = np.asarray(audio, dtype=np.float32)
        if mono.ndim != 1:
            raise InvalidRequest(
                f"audio must be mono samples (one dimension), not shape {mono.shape}",
                param="audio",
            )
        seconds = len(mono) / sample_rate
        if seconds < self.min_seconds or seconds > MAX_SECONDS:
            raise InvalidRequest(
                f"reference audio must last {self.min_seconds:.2f} to {MAX_SECONDS:g} seconds; "
                f"this lasts {seconds:.2f}",
                param="audio",
            )
        if not np.all(np.isfinite(mono)):
            raise InvalidRequest("the audio contains non-finite samples", param="audio")
        if float(np.abs(mono).max()) < SILENT_PEAK:
            raise InvalidRequest("the reference audio is silent", param="audio")
        return mono
