"""The DiT mel generator: codes -> mel frames by flow matching.

Each code becomes `repeats` (2) frames. Starting from Gaussian noise, `FLOW_STEPS` (10)
points on a sway-warped time grid give 9 Euler steps of the velocity the DiT predicts,
with classifier-free guidance: the batch is doubled, the second half seeing no speaker
(zero x-vector, the encoding of a zero reference mel) and code 0 everywhere, and the
velocity is cond + GUIDANCE * (cond - uncond).

Attention is block-wise: frames are grouped in blocks of `block_size` (24 frames = 12
codes) and each layer sees its own block, plus the previous block in the look-back layers
and the next one in the look-ahead layers. One DiT call therefore reaches 2 blocks back
and 1 ahead; 9 calls reach 18 back and 9 ahead, which is why streaming decodes windows
(streaming.py) rather than reproducing the offline result exactly.

`key_valid` marks real frames: padded frames are never attended to, so a stream in a
padded batch gets the mel it would get alone. Module names follow the checkpoint's
`decoder.dit.*` tensors.
"""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn
from torch.nn import functional as F

from ...model.config import SpeakerEncoderConfig
from ...model.speaker_encoder import SpeakerEncoder
from .config import MelGeneratorConfig

FLOW_STEPS = 10
GUIDANCE = 0.5
SWAY = -1.0


def flow_times(
    device: torch.device, dtype: torch.dtype, steps: int = FLOW_STEPS, sway: float = SWAY
) -> torch.Tensor:
    """The Euler grid: linspace(0, 1) warped towards t = 0 by `sway`."""
    t = torch.linspace(0, 1, steps, device=device, dtype=dtype)
    return t + sway * (torch.cos(torch.pi / 2 * t) - 1 + t)


class TimestepEmbedding(nn.Module):
    def __init__(self, dim: int, frequencies: int = 256):
        super().__init__()
        self.frequencies = frequencies
        self.time_mlp = nn.Sequential(nn.Linear(frequencies, dim), nn.SiLU(), nn.Linear(dim, dim))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.frequencies // 2
        scale = math.log(10000) / (half - 1)
        freqs = torch.exp(torch.arange(half, device=t.device).float() * -scale)
        angles = 1000 * t.unsqueeze(1) * freqs.unsqueeze(0)
        return self.time_mlp(torch.cat([angles.sin(), angles.cos()], dim=-1).to(t.dtype))


class CodeEmbedding(nn.Module):
    def __init__(self, config: MelGeneratorConfig):
        super().__init__()
        self.repeats = config.repeats
        self.codec_embed = nn.Embedding(config.num_embeds + 1, config.emb_dim)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        return torch.repeat_interleave(self.codec_embed(codes), self.repeats, dim=1)


def reference_mel_encoder(config: MelGeneratorConfig) -> SpeakerEncoder:
    """The ECAPA-TDNN that turns a voice's reference mel into one vector [enc_dim]: the
    Base talker's speaker encoder (model/speaker_encoder.py), sized by `dit_config`. It
    pools over the whole reference, so it runs once per voice, never per chunk."""
    return SpeakerEncoder(
        SpeakerEncoderConfig(
            mel_dim=config.mel_dim,
            enc_dim=config.enc_dim,
            enc_channels=config.enc_channels,
            enc_kernel_sizes=config.enc_kernel_sizes,
            enc_dilations=config.enc_dilations,
            enc_attention_channels=config.enc_attention_channels,
            enc_res2net_scale=config.enc_res2net_scale,
            enc_se_channels=config.enc_se_channels,
        )
    )


class InputEmbedding(nn.Module):
    """One linear layer over (noisy mel, speaker encoding, code embedding, x-vector)."""

    def __init__(self, config: MelGeneratorConfig):
        super().__init__()
        width = config.mel_dim + config.enc_dim + config.enc_emb_dim + config.emb_dim
        self.proj = nn.Linear(width, config.hidden_size)
        self.spk_encoder = reference_mel_encoder(config)

    def forward(
        self, mel: torch.Tensor, speaker: torch.Tensor, codes: torch.Tensor, xvector: torch.Tensor
    ) -> torch.Tensor:
        frames = mel.shape[1]
        return self.proj(
            torch.cat(
                [
                    mel,
                    speaker.unsqueeze(1).expand(-1, frames, -1),
                    codes,
                    xvector.unsqueeze(1).expand(-1, frames, -1),
                ],
                dim=-1,
            )
        )


class RotaryEmbedding(nn.Module):
    """Rotary positions on interleaved pairs of each head's channels."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq)

    def forward(self, frames: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.arange(frames, device=device).float().unsqueeze(1) * self.inv_freq
        angles = torch.repeat_interleave(angles, 2, dim=-1)
        return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    rotated = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).reshape(x.shape)
    return x * cos + rotated * sin


class AdaptiveNorm(nn.Module):
    """LayerNorm without affine parameters, modulated by the time embedding: `chunks`
    modulation vectors from one linear layer."""

    def __init__(self, dim: int, chunks: int):
        super().__init__()
        self.chunks = chunks
        self.linear = nn.Linear(dim, dim * chunks)

    def modulation(self, time: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.chunk(self.linear(F.silu(time)).unsqueeze(1), self.chunks, dim=-1)


def _modulated_norm(x: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, x.shape[-1:], eps=1e-6) * (1 + scale) + shift


class Attention(nn.Module):
    def __init__(self, config: MelGeneratorConfig):
        super().__init__()
        inner = config.head_dim * config.num_attention_heads
        self.heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.to_q = nn.Linear(config.hidden_size, inner)
        self.to_k = nn.Linear(config.hidden_size, inner)
        self.to_v = nn.Linear(config.hidden_size, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, config.hidden_size)])

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        fused: bool = False,
    ) -> torch.Tensor:
        batch, frames, _ = x.shape

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, frames, self.heads, -1).transpose(1, 2)

        if fused:
            from ...kernels.dit_ops import rotate_pairs

            q, k = rotate_pairs(self.to_q(x), self.to_k(x), *rotary, head_dim=self.head_dim)
            q, k = heads(q), heads(k)
        else:
            q, k = _rotate(heads(self.to_q(x)), *rotary), _rotate(heads(self.to_k(x)), *rotary)
        out = F.scaled_dot_product_attention(q, k, heads(self.to_v(x)), attn_mask=mask)
        return self.to_out[0](out.transpose(1, 2).reshape(batch, frames, -1))


class DiTLayer(nn.Module):
    def __init__(self, config: MelGeneratorConfig, looks_back: bool, looks_ahead: bool):
        super().__init__()
        self.looks_back = looks_back
        self.looks_ahead = looks_ahead
        self.attn_norm = AdaptiveNorm(config.hidden_size, 6)
        self.attn = Attention(config)
        inner = config.hidden_size * config.ff_mult
        # Index 2 was a dropout in training: kept empty so the checkpoint's `ff.ff.3` loads.
        self.ff = nn.Module()
        self.ff.ff = nn.Sequential(
            nn.Linear(config.hidden_size, inner),
            nn.GELU(approximate="tanh"),
            nn.Identity(),
            nn.Linear(inner, config.hidden_size),
        )

    def forward(
        self,
        x: torch.Tensor,
        time: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        fused: bool = False,
    ) -> torch.Tensor:
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = self.attn_norm.modulation(time)
        if fused:
            from ...kernels import dit_ops

            attended = self.attn(dit_ops.modulated_norm(x, scale_a, shift_a), rotary, mask, True)
            x, normed = dit_ops.gated_residual_norm(x, gate_a, attended, scale_f, shift_f)
            return dit_ops.gated_residual(x, gate_f, self.ff.ff(normed))
        x = x + gate_a * self.attn(_modulated_norm(x, scale_a, shift_a), rotary, mask)
        return x + gate_f * self.ff.ff(_modulated_norm(x, scale_f, shift_f))


class MelGenerator(nn.Module):
    """The DiT (`decoder.dit.*`) and its flow-matching sampler. `fused_kernels`: each
    layer's norms, gated residuals and rotary positions as Triton kernels
    (kernels/dit_ops.py; a CUDA device), else torch's operations (any device)."""

    def __init__(self, config: MelGeneratorConfig, fused_kernels: bool = False):
        super().__init__()
        self.config = config
        self.fused_kernels = fused_kernels
        self.time_embed = TimestepEmbedding(config.hidden_size)
        self.text_embed = CodeEmbedding(config)
        self.input_embed = InputEmbedding(config)
        self.rotary_embed = RotaryEmbedding(config.head_dim)
        self.transformer_blocks = nn.ModuleList(
            DiTLayer(config, i in config.look_backward_layers, i in config.look_ahead_layers)
            for i in range(config.num_hidden_layers)
        )
        self.norm_out = AdaptiveNorm(config.hidden_size, 2)
        self.proj_out = nn.Linear(config.hidden_size, config.mel_dim)

    def encode_reference(self, ref_mel: torch.Tensor) -> torch.Tensor:
        """Reference mel [B, T, mel_dim] -> speaker encoding [B, enc_dim]."""
        return self.input_embed.spk_encoder(ref_mel)

    def unconditioned_speaker(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """The encoding of no reference (zeros): [enc_dim]. Zeros are constant in time, so
        their encoding does not depend on their length; 16 frames exceed every reflect
        padding of the encoder."""
        zeros = torch.zeros(1, 16, self.config.mel_dim, device=device, dtype=dtype)
        return self.encode_reference(zeros)[0]

    def attention_masks(self, key_valid: torch.Tensor) -> dict[tuple[bool, bool], torch.Tensor]:
        """Per (looks_back, looks_ahead): [B, 1, T, T] bool, True where a frame may attend.
        Padded keys are hidden; a padded query sees itself (no empty rows, no NaN)."""
        frames = key_valid.shape[1]
        block = torch.arange(frames, device=key_valid.device) // self.config.block_size
        diff = block.unsqueeze(0) - block.unsqueeze(1)  # key block - query block
        itself = torch.eye(frames, dtype=torch.bool, device=key_valid.device)
        keys = key_valid[:, None, None, :]
        masks = {}
        for layer in self.transformer_blocks:
            kind = (layer.looks_back, layer.looks_ahead)
            if kind not in masks:
                allowed = (diff >= -int(kind[0])) & (diff <= int(kind[1]))
                masks[kind] = (allowed & keys) | itself
        return masks

    def velocity(
        self,
        mel: torch.Tensor,
        t: torch.Tensor,
        speaker: torch.Tensor,
        xvector: torch.Tensor,
        code_embedding: torch.Tensor,
        masks: dict[tuple[bool, bool], torch.Tensor],
        rotary: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """The DiT's prediction on a batch already doubled for guidance."""
        time = self.time_embed(t.expand(mel.shape[0]))
        x = self.input_embed(mel, speaker, code_embedding, xvector)
        for layer in self.transformer_blocks:
            mask = masks[(layer.looks_back, layer.looks_ahead)]
            x = layer(x, time, rotary, mask, self.fused_kernels)
        scale, shift = self.norm_out.modulation(time)
        return self.proj_out(_modulated_norm(x, scale, shift))

    @torch.no_grad()
    def sample(
        self,
        codes: torch.Tensor,
        noise: torch.Tensor,
        speaker: torch.Tensor,
        xvector: torch.Tensor,
        key_valid: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """codes [B, T] (>= 0), noise [B, T * repeats, mel_dim], speaker [B, enc_dim],
        xvector [B, enc_emb_dim], key_valid [B, T * repeats] bool -> mel [B, T * repeats,
        mel_dim] (frames, not channels, second)."""
        batch, frames = noise.shape[0], noise.shape[1]
        if key_valid is None:
            key_valid = torch.ones(batch, frames, dtype=torch.bool, device=noise.device)
        none = self.unconditioned_speaker(noise.device, noise.dtype)
        speakers = torch.cat([speaker, none.expand(batch, -1)])
        xvectors = torch.cat([xvector, torch.zeros_like(xvector)])
        code_embedding = torch.cat(
            [self.text_embed(codes), self.text_embed(torch.zeros_like(codes))]
        )
        masks = {k: m.repeat(2, 1, 1, 1) for k, m in self.attention_masks(key_valid).items()}
        rotary = self.rotary_embed(frames, noise.device)
        rotary = (rotary[0].to(noise.dtype), rotary[1].to(noise.dtype))
        times = flow_times(noise.device, noise.dtype)
        mel = noise
        for t0, t1 in itertools.pairwise(times):
            both = self.velocity(
                torch.cat([mel, mel]), t0, speakers, xvectors, code_embedding, masks, rotary
            )
            guided, unguided = both.chunk(2)
            mel = mel + (guided + (guided - unguided) * GUIDANCE) * (t1 - t0)
        return mel
