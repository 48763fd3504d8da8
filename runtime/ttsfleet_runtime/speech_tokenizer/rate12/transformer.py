"""The codec decoder's pre-transformer: causal sliding-window attention over frames.

Each query frame attends to itself and the `sliding_window - 1` frames before it, so a
stream only ever needs the last `sliding_window - 1` keys and values of each layer. They
stay in place in a ring per layer with one row per slot (`ring_spec`), frame position p
at ring index p % (sliding_window - 1): a step reads and writes the rows of the slots it
serves, so these keys (most of a stream's state) are never gathered or scattered with
the rest of it, which holds each stream's next frame position. Shapes are the same at
every step (CUDA-graph friendly) and a chunk of any length continues a stream exactly.

The attention itself is kernels/window_attention.py: the Triton kernel for CUDA tensors,
its torch twin elsewhere; a decoder made with `attention="kernel"` or `"torch"` forces one
(parity tests), for that decoder only.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ...kernels import row_ops
from ...kernels.window_attention import window_attention, window_attention_torch
from .config import CodecDecoderConfig
from .convs import State, StateSpec

_ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu}
_ATTENTION = {"kernel": window_attention, "torch": window_attention_torch}


def check_attention(route: str | None) -> None:
    """`route`: None (the kernel for CUDA tensors, torch ops elsewhere), or one of
    `_ATTENTION` forced ("kernel" on the CPU runs in Triton's interpreter)."""
    if route is not None and route not in _ATTENTION:
        raise ValueError(f"unknown attention route {route!r}; expected one of {list(_ATTENTION)}")


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda:  # one launch instead of four, the same roundings (kernels/row_ops.py)
            return row_ops.rms_norm(x, self.weight, self.eps)
        # Normalised in float32 and cast back before the weight, as the reference does.
        h = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        return self.weight * h.to(x.dtype)


class LayerScale(nn.Module):
    """Per-channel scale of a residual branch; applied by TransformerLayer (fused)."""

    def __init__(self, dim: int, initial: float):
        super().__init__()
        self.scale = nn.Parameter(torch.full((dim,), initial))


class Mlp(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = _ACTIVATIONS[cfg.hidden_act]
        # gate and up as one matmul: derived from the checkpoint's two weights on load.
        self.register_buffer("gate_up_weight", torch.empty(0), persistent=False)
        self.fuse()
        self.register_load_state_dict_post_hook(lambda module, _: module.fuse())

    @torch.no_grad()
    def fuse(self) -> None:
        self.gate_up_weight = torch.cat([self.gate_proj.weight, self.up_proj.weight]).detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = F.linear(x, self.gate_up_weight)
        if x.is_cuda and self.act is F.silu:  # one launch, rounded once (kernels/row_ops.py)
            return self.down_proj(row_ops.silu_mul(gate_up))
        gate, up = gate_up.chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


def rope_inverse_frequencies(head_dim: int, theta: float) -> torch.Tensor:
    """float32 [head_dim / 2], the default (unscaled) RoPE of the reference."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    return 1.0 / (theta**exponents)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class SlidingWindowAttention(nn.Module):
    """Attention of a chunk of frames over the layer's key/value ring and the chunk's own
    keys; `state[<key>.kv_ring]` holds every slot's ring, updated in place."""

    state_key: str = ""

    def __init__(self, cfg: CodecDecoderConfig, attention: str | None = None):
        super().__init__()
        check_attention(attention)
        self.attention = attention
        self.n_heads = cfg.num_attention_heads
        self.n_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.memory = cfg.sliding_window - 1
        bias = cfg.attention_bias
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=bias)
        # q, k and v as one matmul: derived from the checkpoint's three weights on load.
        self.register_buffer("qkv_weight", torch.empty(0), persistent=False)
        self.register_buffer("qkv_bias", None, persistent=False)
        self.fuse()
        self.register_load_state_dict_post_hook(lambda module, _: module.fuse())

    @torch.no_grad()
    def fuse(self) -> None:
        projections = (self.q_proj, self.k_proj, self.v_proj)
        self.qkv_weight = torch.cat([p.weight for p in projections]).detach()
        if self.q_proj.bias is not None:
            self.qkv_bias = torch.cat([p.bias for p in projections]).detach()

    def ring_spec(self) -> StateSpec:
        """A slot's keys and values of the last `memory` frames: [(key, value), kv_heads,
        memory, head_dim], one tensor so that opening a slot clears it at once."""
        shape = (2, self.n_kv_heads, self.memory, self.head_dim)
        return {f"{self.state_key}.kv_ring": (shape, None)}

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        start: torch.Tensor,
        slots: torch.Tensor,
        state: State,
    ) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = F.linear(x, self.qkv_weight, self.qkv_bias).view(b, n, -1, self.head_dim)
        qkv = qkv.transpose(1, 2)  # [B, heads + 2 * kv_heads, n, head_dim]
        # Queries and keys side by side: one rotation for both.
        qk = qkv[:, : self.n_heads + self.n_kv_heads]
        if qk.is_cuda:  # one launch instead of four (kernels/row_ops.py)
            qk = row_ops.rope(qk, cos, sin)
        else:
            qk = torch.addcmul(qk * cos, rotate_half(qk), sin)
        q, k = qk.split([self.n_heads, self.n_kv_heads], dim=1)
        v = qkv[:, self.n_heads + self.n_kv_heads :]
        ring = state[f"{self.state_key}.kv_ring"]
        route = self.attention or ("kernel" if x.is_cuda else "torch")
        out = _ATTENTION[route](q, k, v, ring[:, 0], ring[:, 1], slots, start)  # [B, n, H, d]
        return self.o_proj(out.reshape(b, n, -1))


class TransformerLayer(nn.Module):
    def __init__(self, cfg: CodecDecoderConfig, attention: str | None = None):
        super().__init__()
        self.self_attn = SlidingWindowAttention(cfg, attention)
        self.mlp = Mlp(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)
        self.mlp_layer_scale = LayerScale(cfg.hidden_size, cfg.layer_scale_initial_scale)

    def forward(self, x, cos, sin, start, slots, state: State) -> torch.Tensor:
        # residual + scale * branch, one kernel each (LayerScale holds the official name).
        attn = self.self_attn(self.input_layernorm(x), cos, sin, start, slots, state)
        x = torch.addcmul(x, self.self_attn_layer_scale.scale, attn)
        mlp = self.mlp(self.post_attention_layernorm(x))
        return torch.addcmul(x, self.mlp_layer_scale.scale, mlp)


class PreTransformer(nn.Module):
    """[B, n, latent] -> [B, n, latent]; `state[<key>.position]` is each stream's next frame,
    `slots` [B] int64 the rows of the layers' key/value rings that are the streams'."""

    state_key: str = ""

    def __init__(self, cfg: CodecDecoderConfig, attention: str | None = None):
        super().__init__()
        self.input_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.layers = nn.ModuleList(
            TransformerLayer(cfg, attention) for _ in range(cfg.num_hidden_layers)
        )
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.output_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.register_buffer(
            "inv_freq", rope_inverse_frequencies(cfg.head_dim, cfg.rope_theta), persistent=False
        )

    def state_spec(self) -> StateSpec:
        return {f"{self.state_key}.position": ((), torch.int64)}

    def forward(self, x: torch.Tensor, state: State, slots: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        start = state[f"{self.state_key}.position"]  # [B]
        q_pos = start[:, None] + torch.arange(n, device=x.device)  # [B, n]
        state[f"{self.state_key}.position"] = start + n

        freqs = q_pos[..., None].float() * self.inv_freq  # float32, as the reference
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, n, head_dim]
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)

        h = self.input_proj(x)
        for layer in self.layers:
            h = layer(h, cos, sin, start, slots, state)
        return self.output_proj(self.norm(h))
