"""The 25 Hz speech tokenizer's encoder side: a reference recording -> what cloning needs.

Two things come out of a 16 kHz recording, as qwen-tts 0.1.1 computes them:

- reference codes [T] at 25 Hz for in-context prompts (`SpeechEncoder25Hz`): Whisper's
  log-mel (128 bins, 25 ms / 10 ms), two convolutions (the second halves the rate) run on
  windows of `2 * n_window` mel frames, the first `audio_vq_layers` transformer blocks
  with attention inside windows of `n_window` frames, a strided conv down to 25 Hz, and
  the nearest entry of the one codebook. Only those layers run: the rest of the encoder
  (later blocks, the output projection, the VQ's upward path) serves training, and is in
  the checkpoint but never loaded here.
- the decoder's conditioning (`DecoderVoiceExtractor`): the recording normalised to a
  -6 dBFS peak (what `sox norm -6` does, computed here: SoX's result differs by its
  32-bit integer rounding, below 1e-7 of full scale), then the x-vector of
  `campplus.onnx` on mean-normalised Kaldi fbank features (80 bins, Povey window,
  computed here without torchaudio), L2-normalised, and the BigVGAN-style log-mel [T, 80]
  at 100 frames a second that the DiT's ECAPA-TDNN reads.

Both run in float32 once per uploaded voice; their outputs are stored with the voice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ...model.speaker_encoder import mel_filterbank

# Where the encoder's tensors live in the speech tokenizer's model.safetensors.
ENCODER_PREFIX = "encoder.tokenizer."
SAMPLE_RATE = 16000
# Whisper's front end.
_WHISPER_FFT, _HOP = 400, 160
# The decoder conditioning's front ends.
_PEAK_DBFS = -6.0
_FBANK_BINS, _FBANK_WINDOW, _FBANK_FFT = 80, 400, 512
_REF_MEL_FFT, _REF_MEL_WINDOW, _REF_MEL_BINS = 1024, 640, 80


def whisper_log_mel(audio: torch.Tensor, n_mels: int, multiple: int) -> torch.Tensor:
    """[n] at 16 kHz -> [n_mels, frames]: zero-padded to a multiple of `multiple` samples,
    power mel of a 400-point STFT (the last frame dropped), log10 floored 8 below the
    peak and scaled as Whisper scales it."""
    audio = F.pad(audio, (0, -len(audio) % multiple))
    window = torch.hann_window(_WHISPER_FFT, device=audio.device)
    stft = torch.stft(audio, _WHISPER_FFT, _HOP, window=window, return_complex=True)
    power = stft[..., :-1].abs() ** 2
    basis = mel_filterbank(SAMPLE_RATE, _WHISPER_FFT, n_mels, 0.0, SAMPLE_RATE / 2)
    mel = torch.from_numpy(basis).to(audio.device) @ power
    log_mel = mel.clamp(min=1e-10).log10()
    log_mel = torch.maximum(log_mel, log_mel.max() - 8.0)
    return (log_mel + 4.0) / 4.0


class _Block(nn.Module):
    """A pre-norm Whisper block: windowed self-attention, then a GELU MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.attn_ln = nn.LayerNorm(width)
        self.mlp_ln = nn.LayerNorm(width)
        self.attn = nn.ModuleDict(
            {
                "query": nn.Linear(width, width),
                "key": nn.Linear(width, width, bias=False),
                "value": nn.Linear(width, width),
                "out": nn.Linear(width, width),
            }
        )
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor, window: int) -> torch.Tensor:
        h = self.attn_ln(x)
        q, k, v = (self.attn[name](h) for name in ("query", "key", "value"))
        mixed = torch.cat(
            [
                self._attend(q[s : s + window], k[s : s + window], v[s : s + window])
                for s in range(0, len(x), window)
            ]
        )
        x = x + self.attn["out"](mixed)
        return x + self.mlp(self.mlp_ln(x))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n, width = q.shape
        q, k, v = (t.view(n, self.heads, -1).transpose(0, 1) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(n, width)


class SpeechEncoder25Hz(nn.Module):
    """16 kHz audio -> codes [T] at 25 Hz (one codebook)."""

    def __init__(self, config: dict[str, Any]):
        super().__init__()
        c = config["encoder_config"]
        if c["audio_vq_type"] != "GRVQ" or c["audio_vq_codebook_dim"] != c["n_state"]:
            raise ValueError(
                "the 25 Hz encoder takes a one-group VQ on the encoder's own width "
                f"(audio_vq_type GRVQ, codebook_dim {c['n_state']}); this config has "
                f"{c['audio_vq_type']} with codebook_dim {c['audio_vq_codebook_dim']}"
            )
        width, self.ds_rate = c["n_state"], c["audio_vq_ds_rate"]
        self.n_mels, self.n_window = c["n_mels"], c["n_window"]
        self.sampling_rate = config["input_sample_rate"]
        self.samples_per_frame = config["encode_downsample_rate"]
        self.conv1 = nn.Conv1d(self.n_mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", torch.zeros(c["n_ctx"], width))
        self.blocks = nn.ModuleList(_Block(width, c["n_head"]) for _ in range(c["audio_vq_layers"]))
        self.audio_vq_downsample = nn.Conv1d(width, width, self.ds_rate, stride=self.ds_rate)
        self.register_buffer("codebook", torch.zeros(c["audio_vq_codebook_size"], width))

    def checkpoint_names(self) -> dict[str, str]:
        """Our state-dict name -> the checkpoint's (the tensors this module loads)."""
        names = {k: ENCODER_PREFIX + k for k in self.state_dict()}
        names["codebook"] = ENCODER_PREFIX + "audio_quantizer.rvqs.0.embed"
        return names

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """float32 [n] at 16 kHz -> int64 [n / 640 rounded up] codes."""
        mel = whisper_log_mel(audio.float(), self.n_mels, _HOP * 2 * self.ds_rate)
        chunks = []
        for chunk in mel.split(self.n_window * 2, dim=1):
            h = F.gelu(self.conv2(F.gelu(self.conv1(chunk))))
            chunks.append(h.transpose(0, 1) + self.positional_embedding[: h.shape[1]])
        x = torch.cat(chunks)
        for block in self.blocks:
            x = block(x, self.n_window)
        x = self.audio_vq_downsample(x.transpose(0, 1)[None])[0].transpose(0, 1)
        codebook = self.codebook
        # The reference's distance, term for term: ties break the same way.
        score = -(x.pow(2).sum(1, keepdim=True) - 2 * x @ codebook.T + codebook.pow(2).sum(1))
        return score.max(dim=-1).indices


def load_speech_encoder_25hz(folder: str | Path, device: str | torch.device = "cpu"):
    """The encoder of a 25 Hz speech_tokenizer/ folder, float32 on `device`."""
    from safetensors import safe_open

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    encoder = SpeechEncoder25Hz(config)
    names = encoder.checkpoint_names()
    with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
        present = set(f.keys())
        missing = sorted(n for n in names.values() if n not in present)
        if missing:
            raise ValueError(f"{folder}/model.safetensors lacks encoder tensors: {missing[:5]}")
        state = {ours: f.get_tensor(theirs).float() for ours, theirs in names.items()}
    state["codebook"] = state["codebook"][0]
    encoder.load_state_dict(state, strict=True)
    return encoder.to(device).eval()


def peak_normalised(audio: np.ndarray) -> np.ndarray:
    """`sox norm -6`: the recording scaled so its loudest sample is at -6 dBFS."""
    peak = float(np.abs(audio).max())
    return (audio * (10 ** (_PEAK_DBFS / 20) / peak)).astype(np.float32)


def _kaldi_mel_banks() -> torch.Tensor:
    """Kaldi's 80 triangular filters (mel = 1127 ln(1 + f/700), 20 Hz to Nyquist) over the
    257 bins of a 512-point FFT at 16 kHz, Nyquist's bin empty."""

    def mel(f):
        return 1127.0 * torch.log(1.0 + f / 700.0)

    low, high = mel(torch.tensor(20.0)), mel(torch.tensor(SAMPLE_RATE / 2))
    delta = (high - low) / (_FBANK_BINS + 1)
    left = low + torch.arange(_FBANK_BINS).unsqueeze(1) * delta
    center, right = left + delta, left + 2 * delta
    bins = mel(SAMPLE_RATE / _FBANK_FFT * torch.arange(_FBANK_FFT // 2)).unsqueeze(0)
    up, down = (bins - left) / (center - left), (right - bins) / (right - center)
    banks = torch.clamp(torch.minimum(up, down), min=0.0)
    return F.pad(banks, (0, 1))


def kaldi_fbank(audio: torch.Tensor) -> torch.Tensor:
    """float32 [n] at 16 kHz -> [frames, 80]: Kaldi's fbank with its defaults (25 ms
    frames every 10 ms, no partial frames, DC removed, pre-emphasis 0.97, Povey window,
    power spectrum, log floored at float32 epsilon), no dither."""
    frames = audio.unfold(0, _FBANK_WINDOW, _HOP)
    frames = frames - frames.mean(dim=1, keepdim=True)
    previous = torch.cat([frames[:, :1], frames[:, :-1]], dim=1)
    frames = frames - 0.97 * previous
    window = torch.hann_window(_FBANK_WINDOW, periodic=False, device=audio.device).pow(0.85)
    frames = F.pad(frames * window, (0, _FBANK_FFT - _FBANK_WINDOW))
    power = torch.fft.rfft(frames).abs().pow(2)
    energies = power @ _kaldi_mel_banks().to(audio.device).T
    return energies.clamp(min=torch.finfo(torch.float32).eps).log()


def reference_mel(audio: torch.Tensor) -> torch.Tensor:
    """float32 [n] at 16 kHz -> [frames, 80]: BigVGAN-style natural-log mel magnitudes
    (1024-point STFT of 640-sample Hann windows every 10 ms, reflect-padded, 0-8 kHz)."""
    pad = (_REF_MEL_FFT - _HOP) // 2
    y = F.pad(audio.view(1, 1, -1), (pad, pad), mode="reflect").view(1, -1)
    window = torch.hann_window(_REF_MEL_WINDOW, device=audio.device)
    spec = torch.stft(
        y, _REF_MEL_FFT, _HOP, _REF_MEL_WINDOW, window, center=False, return_complex=True
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    basis = mel_filterbank(SAMPLE_RATE, _REF_MEL_FFT, _REF_MEL_BINS, 0.0, SAMPLE_RATE / 2)
    mel = torch.from_numpy(basis).to(audio.device) @ magnitude
    return torch.log(mel.clamp(min=1e-5))[0].transpose(0, 1)


class DecoderVoiceExtractor:
    """A 16 kHz recording -> (x-vector [192], reference mel [T, 80]), float32 on the CPU:
    the campplus.onnx graph runs in onnxruntime, as in the reference."""

    def __init__(self, campplus: str | Path):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self._session = onnxruntime.InferenceSession(
            str(campplus), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._input = self._session.get_inputs()[0].name

    def extract(self, audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        normalised = torch.from_numpy(peak_normalised(audio))
        with torch.inference_mode():
            feats = kaldi_fbank(normalised)
            feats = feats - feats.mean(dim=0, keepdim=True)
            (xvector,) = self._session.run(None, {self._input: feats[None].numpy()})
            xvector = F.normalize(torch.from_numpy(xvector).flatten(), dim=0)
            mel = reference_mel(normalised)
        return xvector.numpy(), mel.numpy()
