"""The speaker encoder of Base checkpoints: a recording -> the speaker embedding.

What qwen-tts 0.1.1's `extract_speaker_embedding` computes, without librosa: a log-mel
spectrogram of the 24 kHz recording (128 Slaney mel bins of a 1024-point STFT, hop 256,
Hann window, reflect-padded by 384 samples a side, magnitudes floored at 1e-5 before
the log), then the ECAPA-TDNN of the checkpoint (`speaker_encoder.*`): a TDNN, three
SE-Res2Net blocks, multi-layer aggregation, attentive statistics pooling and a final
1x1 conv to `enc_dim` (the talker's width).

Module and parameter names are the checkpoint's, so the weights load as they are. The
encoder runs in float32 whatever the engine's dtype: it runs once per uploaded voice,
and its output is stored.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ..transfers import to_device
from .config import SpeakerEncoderConfig, TTSConfig
from .weights import checkpoint_files

# Prefix of the speaker encoder's tensors in model.safetensors.
CHECKPOINT_PREFIX = "speaker_encoder."

# The reference's mel front end (fixed in `extract_speaker_embedding`, not in the config).
N_FFT = 1024
HOP = 256
N_MELS = 128
_LOG_FLOOR = 1e-5


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (librosa's default)."""
    hz = np.asarray(hz, dtype=np.float64)
    step = 200.0 / 3
    log_step = math.log(6.4) / 27.0
    return np.where(
        hz >= 1000.0,
        1000.0 / step + np.log(np.maximum(hz, 1e-10) / 1000.0) / log_step,
        hz / step,
    )


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    step = 200.0 / 3
    log_step = math.log(6.4) / 27.0
    return np.where(
        mel >= 1000.0 / step,
        1000.0 * np.exp(log_step * (mel - 1000.0 / step)),
        step * mel,
    )


@functools.lru_cache(maxsize=4)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float):
    """float32 [n_mels, n_fft // 2 + 1]: triangular Slaney-normalised filters on the Slaney
    mel scale, computed (and rounded) as librosa.filters.mel computes them."""
    fft_hz = np.fft.rfftfreq(n=n_fft, d=1.0 / sample_rate)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(edges)
    ramps = np.subtract.outer(edges, fft_hz)
    weights = np.zeros((n_mels, len(fft_hz)), dtype=np.float32)
    for i in range(n_mels):
        lower = -ramps[i] / widths[i]
        upper = ramps[i + 2] / widths[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[:, None]
    return weights


def log_mel(audio: torch.Tensor, sample_rate: int) -> torch.Tensor:
    """float32 [n] -> [frames, 128]: the reference's speaker-encoder features."""
    basis = torch.from_numpy(mel_filterbank(sample_rate, N_FFT, N_MELS, 0.0, sample_rate / 2))
    pad = (N_FFT - HOP) // 2
    y = F.pad(audio.float().view(1, 1, -1), (pad, pad), mode="reflect").view(1, -1)
    spec = torch.stft(
        y,
        N_FFT,
        hop_length=HOP,
        win_length=N_FFT,
        window=torch.hann_window(N_FFT, device=audio.device),
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    mel = torch.matmul(to_device(basis, audio.device), magnitude)  # pinned: no stall
    return torch.log(mel.clamp(min=_LOG_FLOOR))[0].transpose(0, 1)


def min_samples(cfg: SpeakerEncoderConfig) -> int:
    """The shortest recording the encoder takes: its widest reflect padding needs more
    mel frames than it pads."""
    widest = max(
        (k - 1) * d // 2 for k, d in zip(cfg.enc_kernel_sizes, cfg.enc_dilations, strict=True)
    )
    return N_FFT - 2 * ((N_FFT - HOP) // 2) + widest * HOP


class TimeDelayBlock(nn.Module):
    """Conv1d with 'same' reflect padding, then ReLU."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.conv = nn.Conv1d(
            in_channels,
            out_channels,
            kernel_size,
            dilation=dilation,
            padding="same",
            padding_mode="reflect",
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.conv(x))


def _pointwise(in_channels: int, out_channels: int) -> nn.Conv1d:
    return nn.Conv1d(in_channels, out_channels, 1, padding="same", padding_mode="reflect")


class Res2NetBlock(nn.Module):
    """Channels split in `scale` groups; group i (i >= 1) is a TDNN of itself plus the
    previous group's output (group 0 passes through)."""

    def __init__(self, channels: int, scale: int, kernel_size: int, dilation: int):
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(
            TimeDelayBlock(width, width, kernel_size, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = list(torch.chunk(x, self.scale, dim=1))
        out = [parts[0]]
        for i, block in enumerate(self.blocks, start=1):
            out.append(block(parts[i] if i == 1 else parts[i] + out[-1]))
        return torch.cat(out, dim=1)


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, se_channels: int):
        super().__init__()
        self.conv1 = _pointwise(channels, se_channels)
        self.conv2 = _pointwise(se_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(F.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, cfg: SpeakerEncoderConfig, i: int):
        super().__init__()
        c_in, c = cfg.enc_channels[i - 1], cfg.enc_channels[i]
        self.tdnn1 = TimeDelayBlock(c_in, c, 1, 1)
        self.res2net_block = Res2NetBlock(
            c, cfg.enc_res2net_scale, cfg.enc_kernel_sizes[i], cfg.enc_dilations[i]
        )
        self.tdnn2 = TimeDelayBlock(c, c, 1, 1)
        self.se_block = SqueezeExcitation(c, cfg.enc_se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def _weighted_stats(x: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation over time of x [B, C, T] under weights summing to 1."""
    mean = (weights * x).sum(dim=2)
    var = (weights * (x - mean.unsqueeze(2)).pow(2)).sum(dim=2)
    return mean, var.clamp(min=1e-12).sqrt()


class AttentiveStatisticsPooling(nn.Module):
    """[B, C, T] -> [B, 2C, 1]: mean and std over time under a learned per-channel
    attention that sees each frame next to the utterance's global mean and std."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayBlock(channels * 3, attention_channels, 1, 1)
        self.conv = _pointwise(attention_channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frames = x.shape[2]
        uniform = torch.full((1, 1, frames), 1.0 / frames, dtype=x.dtype, device=x.device)
        mean, std = _weighted_stats(x, uniform)
        context = torch.cat(
            [x, mean.unsqueeze(2).expand(-1, -1, frames), std.unsqueeze(2).expand(-1, -1, frames)],
            dim=1,
        )
        attention = F.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _weighted_stats(x, attention)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class SpeakerEncoder(nn.Module):
    """ECAPA-TDNN: log-mel [B, frames, mel_dim] -> embedding [B, enc_dim]."""

    def __init__(self, cfg: SpeakerEncoderConfig):
        super().__init__()
        self.config = cfg
        channels = cfg.enc_channels
        self.blocks = nn.ModuleList(
            [
                TimeDelayBlock(
                    cfg.mel_dim, channels[0], cfg.enc_kernel_sizes[0], cfg.enc_dilations[0]
                ),
                *(SERes2NetBlock(cfg, i) for i in range(1, len(channels) - 1)),
            ]
        )
        # Aggregates the SE-Res2Net outputs, concatenated: the reference sizes its input
        # as enc_channels[-1], which must be their sum.
        self.mfa = TimeDelayBlock(
            channels[-1], channels[-1], cfg.enc_kernel_sizes[-1], cfg.enc_dilations[-1]
        )
        self.asp = AttentiveStatisticsPooling(channels[-1], cfg.enc_attention_channels)
        self.fc = _pointwise(channels[-1] * 2, cfg.enc_dim)

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        h = mels.transpose(1, 2)
        outputs = []
        for block in self.blocks:
            h = block(h)
            outputs.append(h)
        h = self.mfa(torch.cat(outputs[1:], dim=1))
        return self.fc(self.asp(h)).squeeze(-1)

    @torch.inference_mode()
    def embed(self, audio: torch.Tensor) -> torch.Tensor:
        """float32 [n] at `config.sample_rate` -> float32 [enc_dim]."""
        mels = log_mel(audio.to(self.fc.weight.device), self.config.sample_rate)
        return self(mels[None].to(self.fc.weight.dtype))[0].float()


def speaker_encoder_shapes(cfg: TTSConfig) -> dict[str, tuple[int, ...]]:
    """Checkpoint name -> shape of every speaker encoder tensor ({} but for Base)."""
    if cfg.speaker_encoder is None:
        return {}
    with torch.device("meta"):
        encoder = SpeakerEncoder(cfg.speaker_encoder)
    return {CHECKPOINT_PREFIX + k: tuple(v.shape) for k, v in encoder.state_dict().items()}


def load_speaker_encoder(path: str | Path, device: str | torch.device = "cpu") -> SpeakerEncoder:
    """The speaker encoder of the Base checkpoint in folder `path`, float32 on `device`."""
    from safetensors import safe_open

    path = Path(path)
    cfg = TTSConfig.from_file(path / "config.json")
    if cfg.speaker_encoder is None:
        raise ValueError(f"{path} is a {cfg.tts_model_type} checkpoint: only Base has one")
    tensors: dict[str, torch.Tensor] = {}
    for name in checkpoint_files(path):
        with safe_open(str(path / name), framework="pt", device="cpu") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is no dict: it has keys(), no __iter__)
                if key.startswith(CHECKPOINT_PREFIX):
                    tensors[key[len(CHECKPOINT_PREFIX) :]] = f.get_tensor(key).float()
    encoder = SpeakerEncoder(cfg.speaker_encoder)
    missing = sorted(set(encoder.state_dict()) - set(tensors))
    if missing:
        raise ValueError(f"{path} lacks {len(missing)} speaker encoder tensors, e.g. {missing[:3]}")
    encoder.load_state_dict(tensors, strict=True)
    return encoder.to(device).eval().requires_grad_(False)
