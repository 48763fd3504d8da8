"""The BigVGAN vocoder: mel frames [B, T, 80] -> 24 kHz waveform [B, T * 240...].

Upsampling transposed convolutions, each followed by residual blocks (AMP blocks) whose
activations are SnakeBeta evaluated at twice the sample rate (anti-aliased: 2x upsample by
a Kaiser-windowed sinc filter, activate, low-pass and 2x downsample). The SnakeBeta is the
one both rates share (speech_tokenizer/snake_beta.py), applied to channels-first tensors
through a transposed view.

The network is not causal (centred convolutions, replicate-padded filters), but its
receptive field is finite: `context_frames` bounds it in mel frames on each side, so a
window with that much mel around a chunk reproduces the chunk's samples of a whole-
utterance run exactly (streaming.py relies on it). Module names follow the checkpoint's
`decoder.bigvgan.*` tensors.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..snake_beta import SnakeBeta
from .config import VocoderConfig

ANTI_ALIAS_TAPS = 12
# Samples on either side an anti-aliased activation reads: its 2x upsampling filter
# reaches taps/4 input samples and its downsampling filter taps/4 more.
ACTIVATION_REACH = ANTI_ALIAS_TAPS // 2


def kaiser_sinc_lowpass(cutoff: float, half_width: float, taps: int) -> torch.Tensor:
    """A Kaiser-windowed sinc low-pass filter [1, 1, taps], normalised to unit DC gain."""
    half = taps // 2
    attenuation = 2.285 * (half - 1) * math.pi * 4 * half_width + 7.95
    if attenuation > 50.0:
        beta = 0.1102 * (attenuation - 8.7)
    elif attenuation >= 21.0:
        beta = 0.5842 * (attenuation - 21) ** 0.4 + 0.07886 * (attenuation - 21.0)
    else:
        beta = 0.0
    window = torch.kaiser_window(taps, beta=beta, periodic=False, dtype=torch.float32)
    if taps % 2 == 0:
        time = torch.arange(-half, half) + 0.5
    else:
        time = torch.arange(taps) - half
    lowpass = 2 * cutoff * window * torch.sinc(2 * cutoff * time)
    return (lowpass / lowpass.sum()).view(1, 1, taps)


class AntiAliasedSnake(nn.Module):
    """SnakeBeta at twice the rate: upsample 2x, activate, downsample 2x. [B, C, T].

    With `fused` (set by `Vocoder`), one Triton kernel (kernels/anti_aliased_snake.py)
    instead of torch's nine."""

    def __init__(self, channels: int):
        super().__init__()
        self.fused = False
        self.act = SnakeBeta(channels)
        taps = ANTI_ALIAS_TAPS
        self.register_buffer("lowpass", kaiser_sinc_lowpass(0.25, 0.3, taps), persistent=False)
        self.up_pad = taps // 2 - 1
        self.up_crop = (self.up_pad * 2 + (taps - 2) // 2, self.up_pad * 2 + (taps - 1) // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            from ...kernels.anti_aliased_snake import anti_aliased_snake

            return anti_aliased_snake(
                x, self.lowpass, self.act.frequency, self.act.inverse_magnitude
            )
        channels = x.shape[1]
        kernel = self.lowpass.to(x.dtype).expand(channels, -1, -1)
        up = F.pad(x, (self.up_pad, self.up_pad), mode="replicate")
        up = 2 * F.conv_transpose1d(up, kernel, stride=2, groups=channels)
        up = up[..., self.up_crop[0] : -self.up_crop[1]]
        activated = self.act(up.transpose(1, 2)).transpose(1, 2)
        half = ANTI_ALIAS_TAPS // 2
        down = F.pad(activated, (half - 1, half), mode="replicate")
        return F.conv1d(down, kernel, stride=2, groups=channels)


class CausalConv(nn.Conv1d):
    """Left-padded so each output sees only the present and past."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        left = self.dilation[0] * (self.kernel_size[0] - 1)
        return super().forward(F.pad(x, (left, 0)))


def _centred_conv(channels: int, kernel: int) -> nn.Conv1d:
    return nn.Conv1d(channels, channels, kernel, padding=(kernel - 1) // 2)


class AMPBlock(nn.Module):
    """x + sum over 3 stages of conv2(act(conv1(act(x)))), conv1 causal and dilated.

    The first two upsampling layers' blocks (`early`) run a centred convolution and
    activation first and keep conv2 causal; later ones have a centred conv2."""

    def __init__(self, channels: int, kernel: int, dilations: tuple[int, ...], early: bool):
        super().__init__()
        self.convs1 = nn.ModuleList(
            CausalConv(channels, channels, kernel, dilation=d) for d in dilations
        )
        self.convs2 = nn.ModuleList(
            CausalConv(channels, channels, kernel) if early else _centred_conv(channels, kernel)
            for _ in dilations
        )
        self.activations = nn.ModuleList(
            AntiAliasedSnake(channels) for _ in range(2 * len(dilations))
        )
        self.pre_conv = _centred_conv(channels, kernel) if early else nn.Identity()
        self.pre_act = AntiAliasedSnake(channels) if early else nn.Identity()
        self.kernel = kernel
        self.dilations = dilations
        self.early = early

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.pre_act(self.pre_conv(x))
        for conv1, conv2, act1, act2 in zip(
            self.convs1, self.convs2, self.activations[::2], self.activations[1::2], strict=True
        ):
            h = conv2(act2(conv1(act1(h))))
            x = x + h
        return x

    def context(self) -> tuple[int, int]:
        """Samples of input (left, right) one output sample can depend on (a bound)."""
        act = ACTIVATION_REACH
        half = (self.kernel - 1) // 2
        left = right = (half + act) if self.early else 0
        for d in self.dilations:
            left += act + (self.kernel - 1) * d + act
            if self.early:
                left += self.kernel - 1
            else:
                left += half
                right += half
            right += 2 * act
        return left, right


class Vocoder(nn.Module):
    """`fused_kernels`: every anti-aliased activation as one Triton kernel (a CUDA
    device); else torch's operations (any device)."""

    def __init__(self, config: VocoderConfig, fused_kernels: bool = False):
        super().__init__()
        self.config = config
        channels = config.upsample_initial_channel
        self.conv_pre = nn.Conv1d(config.mel_dim, channels, 5, padding=2)
        self.ups = nn.ModuleList(
            nn.ModuleList(
                [
                    nn.ConvTranspose1d(
                        channels >> i,
                        channels >> (i + 1),
                        kernel,
                        rate,
                        padding=(kernel - rate) // 2,
                    )
                ]
            )
            for i, (rate, kernel) in enumerate(
                zip(config.upsample_rates, config.upsample_kernel_sizes, strict=True)
            )
        )
        self.resblocks = nn.ModuleList(
            AMPBlock(channels >> (i + 1), kernel, dilations, early=i <= 1)
            for i in range(len(config.upsample_rates))
            for kernel, dilations in zip(
                config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=True
            )
        )
        last = channels >> len(config.upsample_rates)
        self.activation_post = AntiAliasedSnake(last)
        self.conv_post = nn.Conv1d(last, 1, 7, padding=3, bias=False)
        for module in self.modules():
            if isinstance(module, AntiAliasedSnake):
                module.fused = fused_kernels

    @staticmethod
    def normalised_spectrogram(mel: torch.Tensor) -> torch.Tensor:
        """Log mel -> dB, floored at -115 dB, shifted by -20 dB, scaled to [-1, 1]."""
        # A Python number, not a tensor made per call: a tensor built from the host is a
        # copy to the device, which a CUDA graph cannot capture.
        floor = math.exp(-115 / 20.0 * math.log(10))
        decibels = 20 * torch.log10(torch.clamp(torch.exp(mel), min=floor)) - 20
        return torch.clamp(2 * ((decibels + 115) / 115) - 1, -1, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [B, T, mel_dim] -> waveform [B, T * samples_per_mel_frame] in [-1, 1]."""
        x = self.conv_pre(self.normalised_spectrogram(mel).transpose(1, 2))
        per_layer = len(self.config.resblock_kernel_sizes)
        for i, (up,) in enumerate(self.ups):
            x = up(x)
            blocks = self.resblocks[i * per_layer : (i + 1) * per_layer]
            x = sum(block(x) for block in blocks) / per_layer
        waveform = self.conv_post(self.activation_post(x))
        return torch.clamp(waveform, -1.0, 1.0).squeeze(1)

    def context_frames(self) -> tuple[int, int]:
        """Mel frames (left, right) of context that bound one output sample's inputs."""
        left = right = 2.0  # conv_pre
        rate = 1
        per_layer = len(self.config.resblock_kernel_sizes)
        for i, (stride, kernel) in enumerate(
            zip(self.config.upsample_rates, self.config.upsample_kernel_sizes, strict=True)
        ):
            # Output n of a transposed convolution reads inputs (n + padding - tap) / stride.
            padding = (kernel - stride) // 2
            left += (math.ceil((kernel - 1 - padding) / stride) + 1) / rate
            right += (math.ceil(padding / stride) + 1) / rate
            rate *= stride
            blocks = self.resblocks[i * per_layer : (i + 1) * per_layer]
            spans = [block.context() for block in blocks]
            left += max(s[0] for s in spans) / rate
            right += max(s[1] for s in spans) / rate
        left += (ACTIVATION_REACH + 3) / rate  # activation_post, conv_post
        right += (ACTIVATION_REACH + 3) / rate
        return math.ceil(left), math.ceil(right)
