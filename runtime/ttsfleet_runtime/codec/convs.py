"""The codec decoder's convolutional layers, written to run incrementally.

Every layer is causal, so a stream can be decoded a few frames at a time if each layer
keeps the tail of its input from the previous call. Each stateful layer declares the
shape of that tail (`state_spec`) and reads/writes it under its own key in a plain
dict of tensors (`state`), batched over streams. Starting from zeros is exactly the
offline decoder's left zero padding, so one code path serves both: offline decode is a
single call on fresh state.

Module and parameter names follow the official checkpoint (`conv.weight`, `alpha`,
`dwconv`, `pwconv1`, ...) so its safetensors load as they are.
"""

from __future__ import annotations

import torch
from torch import nn

State = dict[str, torch.Tensor]
# Per-stream state layout: key -> (shape, dtype); dtype None means the model's dtype.
StateSpec = dict[str, tuple[tuple[int, ...], torch.dtype | None]]


class Stateful(nn.Module):
    """A layer whose output depends on earlier calls; its state lives in `state[key]`."""

    state_key: str = ""
    context: int = 0  # input samples remembered between calls

    def state_spec(self) -> StateSpec:
        if self.context == 0:
            return {}
        return {self.state_key: ((self.conv.in_channels, self.context), None)}

    def _with_history(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """x prefixed with the remembered input; remembers the new tail."""
        full = torch.cat([state[self.state_key], x], dim=-1)
        state[self.state_key] = full[..., full.shape[-1] - self.context :]
        return full


class CausalConv1d(Stateful):
    """Stride-1 conv that sees only the past: left context of (kernel-1)*dilation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        dilation: int = 1,
        groups: int = 1,
    ):
        super().__init__()
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size, dilation=dilation, groups=groups
        )
        self.context = (kernel_size - 1) * dilation

    def forward(self, x: torch.Tensor, state: State) -> torch.Tensor:
        if self.context == 0:
            return self.conv(x)
        return self.conv(self._with_history(x, state))


class CausalTransposeConv1d(Stateful):
    """Upsampling by `stride` with kernel 2*stride (or stride): each output sample mixes
    the current input sample with at most the previous one, so one sample of history
    suffices. The tail that would overhang the future is never produced."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        if kernel_size not in (stride, 2 * stride):
            raise ValueError("only kernel_size == stride or 2*stride is supported")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.context = kernel_size // stride - 1  # input samples of overlap: 0 or 1

    def forward(self, x: torch.Tensor, state: State) -> torch.Tensor:
        n_out = x.shape[-1] * self.stride
        if self.context == 0:
            return self.conv(x)
        # Output for the remembered sample's first half was emitted by the previous call.
        y = self.conv(self._with_history(x, state))
        return y[..., self.stride : self.stride + n_out]


class SnakeBeta(nn.Module):
    """x + 1/exp(beta) * sin^2(x * exp(alpha)), per channel (log-scale parameters).

    The per-channel factors are derived from the parameters once, whenever they are
    loaded, not on every call: a streaming step is launch-bound and this activation runs
    17 times in it.
    """

    def __init__(self, channels: int):
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))
        self.register_buffer("frequency", torch.empty(1, channels, 1), persistent=False)
        self.register_buffer("inverse_magnitude", torch.empty(1, channels, 1), persistent=False)
        self.derive_factors()
        self.register_load_state_dict_post_hook(lambda module, _: module.derive_factors())

    @torch.no_grad()
    def derive_factors(self) -> None:
        self.frequency = torch.exp(self.alpha.detach())[None, :, None]
        self.inverse_magnitude = (1.0 / (torch.exp(self.beta.detach()) + 1e-9))[None, :, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x, self.inverse_magnitude, torch.sin(x * self.frequency).square())


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor, state: State) -> torch.Tensor:
        h = self.dwconv(x, state).transpose(1, 2)
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)


class ResidualUnit(nn.Module):
    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    def forward(self, x: torch.Tensor, state: State) -> torch.Tensor:
        h = self.conv1(self.act1(x), state)
        return x + self.conv2(self.act2(h), state)


class DecoderBlock(nn.Module):
    """SnakeBeta, upsample by `rate`, three dilated residual units (1, 3, 9)."""

    def __init__(self, in_dim: int, out_dim: int, rate: int):
        super().__init__()
        self.block = nn.ModuleList(
            [
                SnakeBeta(in_dim),
                CausalTransposeConv1d(in_dim, out_dim, 2 * rate, rate),
                *(ResidualUnit(out_dim, d) for d in (1, 3, 9)),
            ]
        )

    def forward(self, x: torch.Tensor, state: State) -> torch.Tensor:
        x = self.block[1](self.block[0](x), state)
        for unit in self.block[2:]:
            x = unit(x, state)
        return x


def run_layer(layer: nn.Module, x: torch.Tensor, state: State) -> torch.Tensor:
    """Call a layer from a mixed list: stateless ones (activations) take x only."""
    if isinstance(layer, (Stateful, ConvNeXtBlock, ResidualUnit, DecoderBlock)):
        return layer(x, state)
    return layer(x)
