"""The codec decoder's convolutional layers, channels-last and written to run incrementally.

Every layer is causal, so a stream can be decoded a few frames at a time if each layer
keeps the tail of its input from the previous call. Each stateful layer declares the
shape of that tail (`state_spec`) and reads/writes it under its own key in a plain
dict of tensors (`state`), batched over streams. Starting from zeros is exactly the
offline decoder's left zero padding, so one code path serves both: offline decode is a
single call on fresh state.

Activations are [B, T, C] (channels-last) throughout: the time axis grows 1920-fold and
the GPU kernels read a sample's channels as one contiguous row, with no transposes.

Every convolution goes through its decoder's `ConvRoute` (`route.conv(layer, x, state,
...)`), which also adds the residual and applies the activation that the *next*
convolution's input needs (SnakeBeta), so the GPU computes each activation once, right
after the convolution. The decoder is given its route when it is made and hands it down
each call; nothing here is process-wide. `EAGER` is `conv_eager` (torch, the reference;
CPU and the parity tests); a GPU server takes the `codec_conv_route` setting's of
`ROUTES`: the Triton implicit-GEMM kernel with the epilogue inside (`conv_kernel`,
kernels/conv1d.py), cuDNN on channels-last tensors (`conv_cudnn`), or one cuBLAS matrix
product over every stream's input windows (`conv_gemm`), the last two with a fused
epilogue kernel (kernels/conv_epilogue.py); "routed" picks the Triton kernel or the
matrix product per call by its shape (`route_for`). Where a route gives both
convolutions of a residual unit to the Triton kernel, the unit is one launch instead
(`residual_unit_kernel`, kernels/residual_unit.py), and the decoder's last unit takes its
head, the convolution to the waveform, along (`residual_unit_head_kernel`). ConvNeXt's
depthwise convolutions run on a Triton kernel on every route but eager
(`ConvRoute.depthwise`). All keep the same state: the tail of each convolution's
(activated) input.

Module and parameter names follow the official checkpoint (`conv.weight`, `alpha`,
`dwconv`, `pwconv1`, ...) so its safetensors load as they are; the layouts the kernels
read are derived from them whenever they are loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..snake_beta import SnakeBeta

State = dict[str, torch.Tensor]
# Per-stream state layout: key -> (shape, dtype); dtype None means the model's dtype.
StateSpec = dict[str, tuple[tuple[int, ...], torch.dtype | None]]
# A convolution's results: (raw output or None, activated output or None).
ConvOut = tuple[torch.Tensor | None, torch.Tensor | None]


class Stateful(nn.Module):
    """A layer whose output depends on earlier calls; its state lives in `state[key]`:
    the last `context` input samples, [B, context, in_channels]."""

    state_key: str = ""
    context: int = 0  # input samples remembered between calls

    def state_spec(self) -> StateSpec:
        if self.context == 0:
            return {}
        return {self.state_key: ((self.context, self.conv.in_channels), None)}

    def remember(self, x: torch.Tensor, state: State) -> None:
        """Keep the last `context` samples of (history, x): a view of x when x is long
        enough, else a small concatenation."""
        length = x.shape[1]
        if length >= self.context:
            state[self.state_key] = x[:, length - self.context :]
        else:
            state[self.state_key] = torch.cat([state[self.state_key][:, length:], x], dim=1)

    def _with_history(self, x: torch.Tensor, state: State) -> torch.Tensor:
        """x prefixed with the remembered input; remembers the new tail."""
        if self.context == 0:
            return x
        full = torch.cat([state[self.state_key], x], dim=1)
        self.remember(x, state)
        return full


def _channels_last_weight(kernel_weight: torch.Tensor) -> torch.Tensor:
    """[taps, Cin, N] -> the conv2d weight [N, Cin, 1, taps] in channels_last memory."""
    w = kernel_weight.permute(2, 1, 0).unsqueeze(2)
    return w.contiguous(memory_format=torch.channels_last)


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
        self.dilation = dilation
        self.context = (kernel_size - 1) * dilation
        self.upsampling = 1
        # The Triton kernels' layout [taps, Cin per group, Cout] (dense or depthwise, else
        # None) and cuDNN's channels-last [Cout, Cin, 1, taps] (dense only); a convolution
        # to one channel (the decoder's head) also [Cin, taps], its taps as the columns of
        # one product (kernels/residual_unit_head.py).
        self.register_buffer("kernel_weight", None, persistent=False)
        self.register_buffer("kernel_bias", None, persistent=False)
        self.register_buffer("cudnn_weight", None, persistent=False)
        self.register_buffer("tap_columns", None, persistent=False)
        self.derive_kernel_layout()
        self.register_load_state_dict_post_hook(lambda module, _: module.derive_kernel_layout())

    @torch.no_grad()
    def derive_kernel_layout(self) -> None:
        groups = self.conv.groups
        if groups in (1, self.conv.in_channels) and groups in (1, self.conv.out_channels):
            self.kernel_weight = self.conv.weight.detach().permute(2, 1, 0).contiguous()
            self.kernel_bias = self.conv.bias.detach().clone()
        if groups == 1:
            self.cudnn_weight = _channels_last_weight(self.kernel_weight)
        if groups == 1 and self.conv.out_channels == 1:
            self.tap_columns = self.kernel_weight[:, :, 0].t().contiguous()

    def torch_forward(self, full: torch.Tensor) -> torch.Tensor:
        """The convolution of history-prefixed input [B, context + T, Cin] -> [B, T, Cout]."""
        return self.conv(full.transpose(1, 2)).transpose(1, 2)


class CausalTransposeConv1d(Stateful):
    """Upsampling by `stride` with kernel 2*stride (or stride): each output sample mixes
    the current input sample with at most the previous one, so one sample of history
    suffices. The tail that would overhang the future is never produced.

    For the kernel, output samples t*stride + j (j < stride) of input sample t are the
    columns j*Cout..(j+1)*Cout of a 2-tap (1-tap) convolution: tap 0 reads sample t-1 with
    the weight's taps stride..2*stride-1, tap 1 sample t with taps 0..stride-1."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int):
        super().__init__()
        if kernel_size not in (stride, 2 * stride):
            raise ValueError("only kernel_size == stride or 2*stride is supported")
        self.conv = nn.ConvTranspose1d(in_channels, out_channels, kernel_size, stride=stride)
        self.stride = stride
        self.upsampling = stride
        self.dilation = 1
        self.context = kernel_size // stride - 1  # input samples of overlap: 0 or 1
        # The kernel's layout [taps, Cin, stride * Cout], and cuDNN's channels-last
        # [stride * Cout, Cin, 1, taps] of it.
        self.register_buffer("kernel_weight", None, persistent=False)
        self.register_buffer("kernel_bias", None, persistent=False)
        self.register_buffer("cudnn_weight", None, persistent=False)
        self.derive_kernel_layout()
        self.register_load_state_dict_post_hook(lambda module, _: module.derive_kernel_layout())

    @torch.no_grad()
    def derive_kernel_layout(self) -> None:
        w = self.conv.weight.detach()  # [Cin, Cout, kernel]
        s, cin = self.stride, w.shape[0]
        taps = [w[:, :, s:], w[:, :, :s]] if self.context else [w]
        # [Cin, Cout, s] -> [Cin, s, Cout] -> [Cin, s * Cout], one per tap.
        self.kernel_weight = torch.stack(
            [tap.permute(0, 2, 1).reshape(cin, -1) for tap in taps]
        ).contiguous()
        self.kernel_bias = self.conv.bias.detach().repeat(s)
        self.cudnn_weight = _channels_last_weight(self.kernel_weight)

    def torch_forward(self, full: torch.Tensor) -> torch.Tensor:
        n_out = (full.shape[1] - self.context) * self.stride
        y = self.conv(full.transpose(1, 2))
        # Output for the remembered sample's first half was emitted by the previous call.
        start = self.stride * self.context
        return y[..., start : start + n_out].transpose(1, 2)


ConvLayer = CausalConv1d | CausalTransposeConv1d


def _epilogue_torch(
    y: torch.Tensor,
    residual: torch.Tensor | None,
    activation: SnakeBeta | None,
    emit_raw: bool,
) -> ConvOut:
    """(y + residual if emit_raw, activation(y + residual) if an activation is given)."""
    if residual is not None:
        y = residual + y
    return (y if emit_raw else None), (activation(y) if activation is not None else None)


def conv_eager(
    layer: ConvLayer,
    x: torch.Tensor,
    state: State,
    *,
    residual: torch.Tensor | None = None,
    activation: SnakeBeta | None = None,
    emit_raw: bool = True,
) -> ConvOut:
    """layer(x) with its history (+ residual): (the output if `emit_raw`, activation(output)
    if an activation is given). x: [B, T, Cin] -> [B, T * upsampling, Cout]."""
    y = layer.torch_forward(layer._with_history(x, state))
    return _epilogue_torch(y, residual, activation, emit_raw)


def conv_kernel(
    layer: ConvLayer,
    x: torch.Tensor,
    state: State,
    *,
    residual: torch.Tensor | None = None,
    activation: SnakeBeta | None = None,
    emit_raw: bool = True,
) -> ConvOut:
    """conv_eager on the Triton kernel (kernels/conv1d.py): one launch, then the new
    history as a view of x (or a small concatenation)."""
    from ...kernels import conv1d

    history = state[layer.state_key] if layer.context else None
    raw, act = conv1d.causal_conv1d(
        x,
        layer.kernel_weight,
        history,
        dilation=layer.dilation,
        bias=layer.kernel_bias,
        residual=residual,
        activation=(activation.frequency, activation.inverse_magnitude) if activation else None,
        emit_raw=emit_raw,
    )
    if layer.context:
        layer.remember(x, state)
    batch, length = x.shape[0], x.shape[1] * layer.upsampling
    out_channels = layer.kernel_weight.shape[2] // layer.upsampling
    return (
        raw.view(batch, length, out_channels) if raw is not None else None,
        act.view(batch, length, out_channels) if act is not None else None,
    )


def residual_unit_kernel(
    unit: ResidualUnit,
    x: torch.Tensor,
    x_act: torch.Tensor,
    state: State,
    next_activation: SnakeBeta,
    emit_raw: bool,
) -> ConvOut:
    """A residual unit's two conv_kernel calls as one launch (kernels/residual_unit.py:
    conv1's activated output never goes to memory); the same state, conv1's input tail."""
    from ...kernels.residual_unit import residual_unit

    raw, act = residual_unit(
        *_unit_arguments(unit, x, x_act, state, next_activation),
        emit_raw=emit_raw,
        dilation=unit.conv1.dilation,
    )
    unit.conv1.remember(x_act, state)
    return raw, act


def _unit_arguments(
    unit: ResidualUnit,
    x: torch.Tensor,
    x_act: torch.Tensor,
    state: State,
    next_activation: SnakeBeta,
) -> tuple:
    """The unit's inputs, history, layouts and activation factors, in the order of
    kernels/residual_unit.py's entry points."""
    conv1, conv2 = unit.conv1, unit.conv2
    return (
        x,
        x_act,
        state[conv1.state_key],
        conv1.kernel_weight,
        conv1.kernel_bias,
        (unit.act2.frequency, unit.act2.inverse_magnitude),
        conv2.kernel_weight,
        conv2.kernel_bias,
        (next_activation.frequency, next_activation.inverse_magnitude),
    )


def residual_unit_head_kernel(
    unit: ResidualUnit,
    x: torch.Tensor,
    x_act: torch.Tensor,
    state: State,
    next_activation: SnakeBeta,
    head: CausalConv1d,
) -> torch.Tensor:
    """The last residual unit, the activation after it and the head (the convolution to
    the waveform) in two launches (kernels/residual_unit_head.py: the unit's output never
    goes to memory); returns the head's output [B, T, 1]. The same state: conv1's input
    tail and the head's."""
    from ...kernels.residual_unit_head import residual_unit_head

    y, head_tail = residual_unit_head(
        *_unit_arguments(unit, x, x_act, state, next_activation),
        head.tap_columns,
        head.kernel_bias,
        state[head.state_key],
        dilation=unit.conv1.dilation,
    )
    unit.conv1.remember(x_act, state)
    state[head.state_key] = head_tail
    return y


def conv_cudnn(
    layer: ConvLayer,
    x: torch.Tensor,
    state: State,
    *,
    residual: torch.Tensor | None = None,
    activation: SnakeBeta | None = None,
    emit_raw: bool = True,
) -> ConvOut:
    """conv_eager on cuDNN without leaving channels-last: the history-prefixed input
    [B, L, Cin] is an NCHW tensor [B, Cin, 1, L] with channels_last strides (a view), the
    weight channels_last [N, Cin, 1, taps] (a transposed convolution as its 2-tap/1-tap
    form), so cuDNN writes [B, 1, T, N] = [B, T, N] rows, which are [B, T * s, Cout]. The
    residual and activation follow (`_epilogue`)."""
    full = layer._with_history(x, state)
    y = torch.nn.functional.conv2d(
        full.unsqueeze(1).permute(0, 3, 1, 2),
        layer.cudnn_weight,
        layer.kernel_bias,
        dilation=(1, layer.dilation),
    )
    batch, length = x.shape[0], x.shape[1] * layer.upsampling
    out_channels = layer.cudnn_weight.shape[0] // layer.upsampling
    # A view when cuDNN kept channels_last (it does for these shapes: tests/codec).
    y = y.permute(0, 2, 3, 1).reshape(batch, length, out_channels)
    return _epilogue(y, residual, activation, emit_raw)


def conv_gemm(
    layer: ConvLayer,
    x: torch.Tensor,
    state: State,
    *,
    residual: torch.Tensor | None = None,
    activation: SnakeBeta | None = None,
    emit_raw: bool = True,
) -> ConvOut:
    """conv_eager as one matrix product (cuBLAS on a GPU, whose heuristics pick a good
    kernel for every shape with no timing): each output sample's input window, its taps
    side by side, is a row of [B * T, taps * Cin] (a gather of the history-prefixed input;
    no copy for one tap), times the Triton kernel's weight layout [taps, Cin, N] read as
    [taps * Cin, N], bias added in the product. The residual and activation follow
    (`_epilogue`)."""
    full = layer._with_history(x, state)
    taps, cin, n = layer.kernel_weight.shape
    batch, length = x.shape[0], x.shape[1]
    if taps == 1:
        windows = full.reshape(batch * length, cin)
    else:
        span = (taps - 1) * layer.dilation + 1
        # [B, T, Cin, span] -> the taps [B, T, Cin, taps] -> [B * T, taps * Cin] (copied).
        taps_of = full.unfold(1, span, 1)[..., :: layer.dilation]
        windows = taps_of.transpose(2, 3).reshape(batch * length, taps * cin)
    y = torch.addmm(layer.kernel_bias, windows, layer.kernel_weight.view(taps * cin, n))
    y = y.view(batch, length * layer.upsampling, n // layer.upsampling)
    return _epilogue(y, residual, activation, emit_raw)


def _epilogue(
    y: torch.Tensor,
    residual: torch.Tensor | None,
    activation: SnakeBeta | None,
    emit_raw: bool,
) -> ConvOut:
    """What follows a convolution computed outside the Triton kernel: the residual and the
    activation in one fused kernel on a GPU (kernels/conv_epilogue.py), in torch on a CPU."""
    if not y.is_cuda:
        return _epilogue_torch(y, residual, activation, emit_raw)
    from ...kernels.conv_epilogue import snake_epilogue

    return snake_epilogue(
        y,
        residual,
        (activation.frequency, activation.inverse_magnitude) if activation else None,
        emit_raw,
    )


# Where the Triton kernel beats the product (H100, bench/codec_scale.py per layer at 1 x 1,
# 8 x 2, 32 x 2 and 128 x 8 streams x frames; at commit 7d79071:
# bench/results/h100-2026-11-23-issue12-s9-codec_scale.json): every
# convolution whose input brings each stream at least two of the kernel's 128-sample tiles,
# whatever its taps and channels (2-5x faster than the product for the last three blocks'
# dilated convolutions, even for 1x1 ones). Below that the kernel's per-stream tiles are
# mostly masked and the product (one matrix over every stream's rows) wins by 2-10x: the
# pre-transformer convolutions and the first block, at 1-32 samples per stream.
TRITON_MIN_SAMPLES = 256


def route_for(samples: int) -> str:
    """The route ("triton" or "gemm") of a convolution whose input has `samples` samples
    per stream: a Python decision on shapes, made once when a CUDA graph is captured."""
    return "triton" if samples >= TRITON_MIN_SAMPLES else "gemm"


def conv_routed(
    layer: ConvLayer,
    x: torch.Tensor,
    state: State,
    *,
    residual: torch.Tensor | None = None,
    activation: SnakeBeta | None = None,
    emit_raw: bool = True,
) -> ConvOut:
    """conv_kernel or conv_gemm, as `route_for` decides."""
    route = route_for(x.shape[1])
    chosen = conv_gemm if route == "gemm" else conv_kernel
    return chosen(layer, x, state, residual=residual, activation=activation, emit_raw=emit_raw)


def _depthwise_kernel(layer: CausalConv1d, x: torch.Tensor, state: State) -> torch.Tensor:
    """A depthwise causal convolution on kernels/conv1d.py's depthwise kernel, which reads
    the history where it is (torch's needs it concatenated with x first: two launches and
    a copy)."""
    from ...kernels.conv1d import depthwise_causal_conv1d

    y = depthwise_causal_conv1d(
        x,
        layer.kernel_weight[:, 0],
        state[layer.state_key],
        bias=layer.kernel_bias,
        dilation=layer.dilation,
    )
    layer.remember(x, state)
    return y


@dataclasses.dataclass(frozen=True)
class ConvRoute:
    """What runs a decoder's convolutions: `conv` for every dense one (one of the `conv_*`
    functions above), and the choices that follow from it. Immutable, given to a
    `CodecDecoder` when it is made, so two decoders in one process may take two routes.
    `fuse_residual_units` False times a residual unit as its two calls (benchmarks)."""

    name: str
    conv: Callable[..., ConvOut]
    fuse_residual_units: bool = True

    @property
    def times_cudnn(self) -> bool:
        """Whether dense convolutions go to cuDNN, whose algorithm choice needs benchmark
        mode on these shapes (the capture turns it on only then: timing the candidates
        costs ~0.1 s per new shape)."""
        return self.conv is conv_cudnn

    def fuses_residual_unit(self, channels: int, samples: int) -> bool:
        """Whether a residual unit of `channels` with `samples` input samples a stream
        runs as one launch: the route gives both its convolutions (same samples, same
        shapes but taps) to the Triton kernel, and the width fits
        (kernels/residual_unit.py)."""
        if not self.fuse_residual_units:
            return False
        if self.conv is conv_routed:
            on_kernel = route_for(samples) == "triton"
        else:
            on_kernel = self.conv is conv_kernel
        if not on_kernel:
            return False
        from ...kernels.residual_unit import MAX_CHANNELS

        return channels <= MAX_CHANNELS

    def fuses_head(self, channels: int, samples: int, head: CausalConv1d) -> bool:
        """Whether the last residual unit (`channels`, `samples` a stream) runs with the
        head after it (`residual_unit_head_kernel`): the unit runs as one launch, and the
        head is a dense undilated convolution to one channel whose history those samples
        cover."""
        from ...kernels.residual_unit_head import HEAD_COLUMNS

        return (
            self.fuses_residual_unit(channels, samples)
            and head.tap_columns is not None
            and head.dilation == 1
            and 2 <= head.tap_columns.shape[1] <= HEAD_COLUMNS.value
            and samples >= head.context
        )

    def depthwise(self, layer: CausalConv1d, x: torch.Tensor, state: State) -> torch.Tensor:
        """A depthwise causal convolution (ConvNeXt's): torch's on the eager route, the
        Triton kernel's on every other one."""
        if self.conv is conv_eager:
            return conv_eager(layer, x, state)[0]
        return _depthwise_kernel(layer, x, state)


ROUTES = {
    name: ConvRoute(name, conv)
    for name, conv in {
        "eager": conv_eager,
        "triton": conv_kernel,
        "cudnn": conv_cudnn,
        "gemm": conv_gemm,
        "routed": conv_routed,
    }.items()
}
EAGER = ROUTES["eager"]


class ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dwconv = CausalConv1d(dim, dim, kernel_size=7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(1e-6 * torch.ones(dim))

    def forward(self, x: torch.Tensor, state: State, route: ConvRoute) -> torch.Tensor:
        h = route.depthwise(self.dwconv, x, state)
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + self.gamma * h


class ResidualUnit(nn.Module):
    """x + conv2(act2(conv1(act1(x)))). `act1(x)` comes in ready (the layer before applied
    it), and the unit applies the activation its successor needs to its output."""

    def __init__(self, dim: int, dilation: int):
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv1d(dim, dim, kernel_size=7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv1d(dim, dim, kernel_size=1)

    def forward(
        self,
        x: torch.Tensor,
        x_act: torch.Tensor,
        state: State,
        next_activation: SnakeBeta,
        emit_raw: bool,
        route: ConvRoute,
    ) -> ConvOut:
        """(x, act1(x)) -> (output if emit_raw, next_activation(output))."""
        if route.fuses_residual_unit(x.shape[2], x.shape[1]):
            return residual_unit_kernel(self, x, x_act, state, next_activation, emit_raw)
        _, h_act = route.conv(self.conv1, x_act, state, activation=self.act2, emit_raw=False)
        return route.conv(
            self.conv2,
            h_act,
            state,
            residual=x,
            activation=next_activation,
            emit_raw=emit_raw,
        )


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

    @property
    def activation(self) -> SnakeBeta:
        """The block's input activation, applied by the layer before it."""
        return self.block[0]

    def forward(
        self,
        x_act: torch.Tensor,
        state: State,
        next_activation: SnakeBeta,
        route: ConvRoute,
        head: CausalConv1d | None = None,
    ) -> torch.Tensor:
        """activation(x) -> next_activation(block output), or with a `head` (the decoder's
        last convolution) head(next_activation(block output)), in one pass with the last
        unit where the route allows (`fuses_head`)."""
        units = list(self.block[2:])
        x, x_act = route.conv(self.block[1], x_act, state, activation=units[0].act1)
        for i, unit in enumerate(units):
            last = i == len(units) - 1
            follower = next_activation if last else units[i + 1].act1
            if last and head is not None and route.fuses_head(x.shape[2], x.shape[1], head):
                return residual_unit_head_kernel(unit, x, x_act, state, follower, head)
            x, x_act = unit(x, x_act, state, follower, emit_raw=not last, route=route)
        if head is not None:
            return route.conv(head, x_act, state)[0]
        return x_act
