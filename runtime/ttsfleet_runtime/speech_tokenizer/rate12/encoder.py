"""The speech tokenizer's encoder: 24 kHz audio -> codes [frames, 16], for voice cloning.

A Base model clones a voice in context from the codes of a reference recording; these are
the codes qwen-tts 0.1.1's `speech_tokenizer.encode` gives (transformers' Mimi encoder):

SEANet (causal convs, ELU, residual blocks, strided downsampling to 25 Hz) -> causal
transformer (LayerNorm, RoPE, GELU MLP, layer scales) -> strided conv to 12.5 Hz ->
split residual VQ (semantic codebook, then acoustic residual codebooks), each code the
nearest codebook entry (Euclidean) to what is left of the frame.

The reference's transformer attends causally over the whole recording: transformers'
Mimi builds a plain causal mask and ignores the config's `sliding_window`, so this one
does too. Only the first `encoder_valid_num_quantizers` codebooks are computed: the
residual chain is sequential, so the ones after them cannot change these.

The encoder runs in float32 whatever the engine's dtype: a code is an argmin over
distances, which half precision would flip against the reference, and the encoder runs
once per uploaded voice.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from .config import CodecEncoderConfig, SpeechTokenizerConfig
from .quantizer import codebook_vectors
from .transformer import rope_inverse_frequencies, rotate_half

# Prefix of the encoder's tensors in the speech tokenizer's safetensors.
CHECKPOINT_PREFIX = "encoder."


class CausalConv(nn.Module):
    """Mimi's causal conv on a whole signal: left padding of (effective kernel - stride),
    and right padding that completes the last stride, so n samples give ceil(n / stride)
    outputs."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        dilation: int = 1,
        bias: bool = True,
        pad_mode: str = "constant",
    ):
        super().__init__()
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size, stride, dilation=dilation, bias=bias
        )
        self.stride = stride
        self.kernel = (kernel_size - 1) * dilation + 1
        self.padding = self.kernel - stride
        self.pad_mode = pad_mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[-1]
        frames = math.ceil((length - self.kernel + self.padding) / self.stride + 1) - 1
        extra = frames * self.stride + self.kernel - self.padding - length
        return self.conv(F.pad(x, (self.padding, extra), mode=self.pad_mode))


class ResidualBlock(nn.Module):
    """x + conv(ELU(conv(ELU(x)))), the second conv 1x1 (the SEANet residual unit)."""

    def __init__(self, cfg: CodecEncoderConfig, dim: int, dilation: int):
        super().__init__()
        hidden = dim // cfg.compress
        self.block = nn.ModuleList(
            [
                nn.ELU(),
                CausalConv(dim, hidden, cfg.residual_kernel_size, dilation=dilation),
                nn.ELU(),
                CausalConv(hidden, dim, 1),
            ]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for layer in self.block:
            h = layer(h)
        return x + h


class SEANetEncoder(nn.Module):
    """Audio [B, 1, n] -> [B, hidden, ceil(n / prod(ratios))]. Layer indices (ELUs
    included) are the checkpoint's."""

    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        dim = cfg.num_filters
        layers: list[nn.Module] = [CausalConv(cfg.audio_channels, dim, cfg.kernel_size)]
        for ratio in reversed(cfg.upsampling_ratios):
            layers += [
                ResidualBlock(cfg, dim, cfg.dilation_growth_rate**j)
                for j in range(cfg.num_residual_layers)
            ]
            layers += [nn.ELU(), CausalConv(dim, dim * 2, 2 * ratio, stride=ratio)]
            dim *= 2
        layers += [nn.ELU(), CausalConv(dim, cfg.hidden_size, cfg.last_kernel_size)]
        self.layers = nn.ModuleList(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class LayerScale(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * x


class Attention(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = (
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            d,
        )
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(h, self.n_heads * d, bias=bias)
        self.k_proj = nn.Linear(h, self.n_kv_heads * d, bias=bias)
        self.v_proj = nn.Linear(h, self.n_kv_heads * d, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * d, h, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        repeat = self.n_heads // self.n_kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class Mlp(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        if cfg.hidden_act != "gelu":
            raise ValueError(f"unsupported encoder activation {cfg.hidden_act!r}")
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.norm_eps)
        self.mlp = Mlp(cfg)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn_layer_scale(self.self_attn(self.input_layernorm(x), cos, sin))
        return x + self.mlp_layer_scale(self.mlp(self.post_attention_layernorm(x)))


class Transformer(nn.Module):
    """[B, T, hidden] -> [B, T, hidden], causal over the whole sequence."""

    def __init__(self, cfg: CodecEncoderConfig):
        super().__init__()
        self.layers = nn.ModuleList(TransformerLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.register_buffer(
            "inv_freq", rope_inverse_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.shape[1], device=x.device, dtype=torch.float32)
        freqs = torch.outer(positions, self.inv_freq.float())
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return x


class Codebook(nn.Module):
    """EMA codebook statistics as the checkpoint stores them (`initialized` is carried so
    the tensors load as they are)."""

    def __init__(self, size: int, dim: int):
        super().__init__()
        self.register_buffer("initialized", torch.ones(1))
        self.register_buffer("cluster_usage", torch.ones(size))
        self.register_buffer("embed_sum", torch.zeros(size, dim))

    def vectors(self) -> torch.Tensor:
        return codebook_vectors(self.embed_sum, self.cluster_usage)


class _CodebookLayer(nn.Module):
    def __init__(self, size: int, dim: int):
        super().__init__()
        self.codebook = Codebook(size, dim)


class ResidualQuantizer(nn.Module):
    """Projection to the codebook width, then n codebooks, each coding what the previous
    ones left."""

    def __init__(self, n: int, cfg: CodecEncoderConfig):
        super().__init__()
        self.input_proj = nn.Conv1d(
            cfg.hidden_size, cfg.vector_quantization_hidden_dimension, 1, bias=False
        )
        self.layers = nn.ModuleList(
            _CodebookLayer(cfg.codebook_size, cfg.codebook_dim) for _ in range(n)
        )

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[B, hidden, T] -> codes [B, T, n]"""
        residual = self.input_proj(x).transpose(1, 2)  # [B, T, dim]
        codes = []
        for layer in self.layers:
            table = layer.codebook.vectors()
            # cdist as the reference calls it (rows flattened), so ties break the same way.
            flat = residual.reshape(-1, residual.shape[-1])
            index = torch.cdist(flat[None].float(), table[None].float(), p=2)[0].argmin(dim=-1)
            index = index.view(residual.shape[:-1])
            residual = residual - F.embedding(index, table)
            codes.append(index)
        return torch.stack(codes, dim=-1)


class SplitResidualQuantizer(nn.Module):
    def __init__(self, cfg: CodecEncoderConfig, num_quantizers: int):
        super().__init__()
        semantic = cfg.num_semantic_quantizers
        self.semantic_residual_vector_quantizer = ResidualQuantizer(semantic, cfg)
        self.acoustic_residual_vector_quantizer = ResidualQuantizer(num_quantizers - semantic, cfg)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """[B, hidden, T] -> codes [B, T, num_quantizers]"""
        return torch.cat(
            [
                self.semantic_residual_vector_quantizer.encode(x),
                self.acoustic_residual_vector_quantizer.encode(x),
            ],
            dim=-1,
        )


class CodecEncoder(nn.Module):
    """24 kHz mono audio -> codes; state-dict names are the checkpoint's (less the
    `encoder.` prefix and the codebooks past `num_quantizers`)."""

    def __init__(self, cfg: CodecEncoderConfig, num_quantizers: int):
        super().__init__()
        self.config = cfg
        # The SEANet's stride, then Mimi's downsampling conv (stride 2).
        self.samples_per_frame = cfg.seanet_stride * 2
        self.encoder = SEANetEncoder(cfg)
        self.encoder_transformer = Transformer(cfg)
        self.downsample = CausalConv(
            cfg.hidden_size,
            cfg.hidden_size,
            cfg.downsample_kernel,
            stride=2,
            bias=False,
            pad_mode="replicate",
        )
        self.quantizer = SplitResidualQuantizer(cfg, num_quantizers)

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor) -> torch.Tensor:
        """float32 [n] at `config.sampling_rate` -> int64 codes [ceil(n / 1920), Q]."""
        x = audio.to(self.downsample.conv.weight).view(1, 1, -1)
        h = self.encoder(x)
        h = self.encoder_transformer(h.transpose(1, 2)).transpose(1, 2)
        codes = self.quantizer.encode(self.downsample(h))[0]
        return codes[: -(-audio.shape[-1] // self.samples_per_frame)]


def load_codec_encoder(directory: str | Path, device: str | torch.device = "cpu") -> CodecEncoder:
    """The encoder half of an official `speech_tokenizer/` folder, float32 on `device`."""
    from safetensors import safe_open

    directory = Path(directory)
    cfg = SpeechTokenizerConfig.from_dir(directory)
    encoder = CodecEncoder(
        CodecEncoderConfig.from_dict(cfg.encoder), cfg.encoder_valid_num_quantizers
    )
    if encoder.samples_per_frame != cfg.encode_downsample_rate:
        raise ValueError(
            f"the encoder strides by {encoder.samples_per_frame} samples a frame, "
            f"config says encode_downsample_rate={cfg.encode_downsample_rate}"
        )
    wanted = set(encoder.state_dict())
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no dict: it has keys(), no __iter__)
                short = name[len(CHECKPOINT_PREFIX) :]
                if name.startswith(CHECKPOINT_PREFIX) and short in wanted:
                    tensors[short] = f.get_tensor(name).float()
    missing = sorted(wanted - set(tensors))
    if missing:
        raise ValueError(f"{directory} lacks {len(missing)} encoder tensors, e.g. {missing[:3]}")
    encoder.load_state_dict(tensors, strict=True)
    return encoder.to(device).eval().requires_grad_(False)
