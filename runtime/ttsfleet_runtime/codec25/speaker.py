"""The reference-mel encoder (an ECAPA-TDNN): a speaker's reference mel [T, 80] -> one
vector [enc_dim] that conditions every mel frame the DiT generates.

It pools over the whole reference, so the decoder runs it once per voice (when a stream
opens), never per chunk. Channels-first [B, C, T] like the checkpoint's convolutions,
whose names (`blocks`, `mfa`, `asp`, `fc`) it keeps so the tensors load by name.
"""

from __future__ import annotations

import torch
from torch import nn

from .config import MelGeneratorConfig


def _same_conv(in_channels: int, out_channels: int, kernel: int, dilation: int = 1) -> nn.Conv1d:
    """A convolution that keeps the length, reflecting the edges."""
    return nn.Conv1d(
        in_channels,
        out_channels,
        kernel,
        dilation=dilation,
        padding="same",
        padding_mode="reflect",
    )


class TimeDelayLayer(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel: int, dilation: int):
        super().__init__()
        self.conv = _same_conv(in_channels, out_channels, kernel, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


class Res2NetLayer(nn.Module):
    """Channels split into `scale` groups; each group after the first is convolved with
    the previous group's output added: a hierarchy of receptive fields in one layer."""

    def __init__(self, channels: int, scale: int, kernel: int, dilation: int):
        super().__init__()
        width = channels // scale
        self.scale = scale
        self.blocks = nn.ModuleList(
            TimeDelayLayer(width, width, kernel, dilation) for _ in range(scale - 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        parts = torch.chunk(x, self.scale, dim=1)
        outputs = [parts[0]]
        previous = None
        for part, block in zip(parts[1:], self.blocks, strict=True):
            previous = block(part if previous is None else part + previous)
            outputs.append(previous)
        return torch.cat(outputs, dim=1)


class SqueezeExcite(nn.Module):
    """Channel gates from the time-averaged activations."""

    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.conv1 = _same_conv(channels, squeezed, 1)
        self.conv2 = _same_conv(squeezed, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.conv2(torch.relu(self.conv1(x.mean(dim=2, keepdim=True)))))
        return x * gate


class SERes2NetBlock(nn.Module):
    def __init__(self, config: MelGeneratorConfig, index: int):
        super().__init__()
        c_in, c_out = config.enc_channels[index - 1], config.enc_channels[index]
        self.tdnn1 = TimeDelayLayer(c_in, c_out, 1, 1)
        self.res2net_block = Res2NetLayer(
            c_out,
            config.enc_res2net_scale,
            config.enc_kernel_sizes[index],
            config.enc_dilations[index],
        )
        self.tdnn2 = TimeDelayLayer(c_out, c_out, 1, 1)
        self.se_block = SqueezeExcite(c_out, config.enc_se_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se_block(self.tdnn2(self.res2net_block(self.tdnn1(x))))


def _weighted_statistics(
    x: torch.Tensor, weights: torch.Tensor, eps: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor]:
    mean = (weights * x).sum(dim=2)
    variance = (weights * (x - mean.unsqueeze(2)).pow(2)).sum(dim=2)
    return mean, torch.sqrt(variance.clamp(eps))


class AttentivePooling(nn.Module):
    """Mean and standard deviation over time, weighted by an attention over frames that
    itself sees the utterance's global statistics."""

    def __init__(self, channels: int, attention_channels: int):
        super().__init__()
        self.tdnn = TimeDelayLayer(channels * 3, attention_channels, 1, 1)
        self.conv = _same_conv(attention_channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[2]
        uniform = torch.full((1, 1, length), 1.0 / length, dtype=x.dtype, device=x.device)
        mean, std = _weighted_statistics(x, uniform)
        context = torch.cat(
            [x, mean.unsqueeze(2).expand(-1, -1, length), std.unsqueeze(2).expand(-1, -1, length)],
            dim=1,
        )
        attention = torch.softmax(self.conv(torch.tanh(self.tdnn(context))), dim=2)
        mean, std = _weighted_statistics(x, attention)
        return torch.cat([mean, std], dim=1).unsqueeze(2)


class ReferenceMelEncoder(nn.Module):
    """ECAPA-TDNN: reference mel [B, T, mel_dim] -> [B, enc_dim]."""

    # Shortest reference the reflect padding of the widest layer accepts; a voice without
    # a reference is encoded from zeros of this length (constant in time, so the result
    # does not depend on it).
    MIN_FRAMES = 16

    def __init__(self, config: MelGeneratorConfig):
        super().__init__()
        channels = config.enc_channels
        self.blocks = nn.ModuleList(
            [
                TimeDelayLayer(
                    config.mel_dim, channels[0], config.enc_kernel_sizes[0], config.enc_dilations[0]
                ),
                *(SERes2NetBlock(config, i) for i in range(1, len(channels) - 1)),
            ]
        )
        self.mfa = TimeDelayLayer(
            channels[-1], channels[-1], config.enc_kernel_sizes[-1], config.enc_dilations[-1]
        )
        self.asp = AttentivePooling(channels[-1], config.enc_attention_channels)
        self.fc = _same_conv(channels[-1] * 2, config.enc_dim, 1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = mel.transpose(1, 2)
        features = []
        for block in self.blocks:
            x = block(x)
            features.append(x)
        x = self.mfa(torch.cat(features[1:], dim=1))
        return self.fc(self.asp(x)).squeeze(-1)
