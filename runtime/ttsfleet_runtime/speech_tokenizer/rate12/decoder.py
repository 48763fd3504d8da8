"""The speech tokenizer's decoder: codes [B, T, 16] -> 24 kHz waveform, 1920 samples a frame.

quantizer lookup -> causal conv -> sliding-window transformer -> 2 x (transposed conv x2,
ConvNeXt) -> conv -> 4 x (SnakeBeta, transposed conv, 3 dilated residual units) ->
SnakeBeta -> conv -> clamp to [-1, 1].

`step(codes, state, slots)` decodes the next frames of B streams given their state (see
`convs.py`, and `transformer.py` for the key/value rings addressed by slot);
`decode(codes)` is the offline decode: steps on fresh state. Because every layer carries
its exact left context, chunked decoding is identical to one pass (unlike the
reference's `chunked_decode`, which restarts with 25 frames of context every 300).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from .config import CodecDecoderConfig, SpeechTokenizerConfig
from .convs import (
    EAGER,
    CausalConv1d,
    CausalTransposeConv1d,
    ConvNeXtBlock,
    ConvRoute,
    DecoderBlock,
    SnakeBeta,
    State,
    StateSpec,
)
from .quantizer import SplitResidualQuantizer
from .transformer import PreTransformer, rope_inverse_frequencies

# Prefix of the decoder's tensors in the speech tokenizer's safetensors.
CHECKPOINT_PREFIX = "decoder."


class CodecDecoder(nn.Module):
    """`route`: what runs the convolutions (convs.py `ROUTES`; eager torch by default);
    `attention`: the pre-transformer's attention forced to "kernel" or "torch" (None:
    by device). Both this decoder's alone."""

    def __init__(
        self, cfg: CodecDecoderConfig, route: ConvRoute = EAGER, attention: str | None = None
    ):
        super().__init__()
        self.config = cfg
        self.route = route
        self.samples_per_frame = cfg.samples_per_frame
        self.quantizer = SplitResidualQuantizer(
            cfg.num_quantizers, cfg.num_semantic_quantizers, cfg.codebook_size, cfg.codebook_dim
        )
        self.pre_conv = CausalConv1d(cfg.codebook_dim, cfg.latent_dim, kernel_size=3)
        self.pre_transformer = PreTransformer(cfg, attention)
        self.upsample = nn.ModuleList(
            nn.ModuleList(
                [
                    CausalTransposeConv1d(cfg.latent_dim, cfg.latent_dim, r, r),
                    ConvNeXtBlock(cfg.latent_dim),
                ]
            )
            for r in cfg.upsampling_ratios
        )
        dims = [cfg.decoder_dim // 2**i for i in range(len(cfg.upsample_rates) + 1)]
        self.decoder = nn.ModuleList(
            [
                CausalConv1d(cfg.latent_dim, dims[0], kernel_size=7),
                *(
                    DecoderBlock(dims[i], dims[i + 1], rate)
                    for i, rate in enumerate(cfg.upsample_rates)
                ),
                SnakeBeta(dims[-1]),
                CausalConv1d(dims[-1], 1, kernel_size=7),
            ]
        )
        for name, module in self.named_modules():
            if hasattr(module, "state_spec") or hasattr(module, "ring_spec"):
                module.state_key = name

    def on_route(self, route: ConvRoute) -> CodecDecoder:
        """A decoder of these same modules and weights whose convolutions run on `route`:
        a benchmark compares routes without loading the weights again. This one keeps
        its own route."""
        other = copy.copy(self)  # shares the modules, parameters and buffers
        other.route = route
        return other

    # ---------------------------------------------------------------- state
    def state_spec(self) -> StateSpec:
        """Every stream's gathered state: key -> (per-stream shape, dtype or None = model's).
        Its rows are gathered per call and the step replaces each entry."""
        return self._collect_spec("state_spec")

    def ring_spec(self) -> StateSpec:
        """State that stays in place, one row per slot, read and written by `step` through
        the slot index (the transformer's key/value rings): key -> (per-slot shape, dtype).
        The state holds the whole buffers, [slots, *shape]."""
        return self._collect_spec("ring_spec")

    def _collect_spec(self, method: str) -> StateSpec:
        spec: StateSpec = {}
        for module in self.modules():
            if hasattr(module, method) and module is not self:
                spec.update(getattr(module, method)())
        return spec

    def initial_state(self, batch: int) -> State:
        """Fresh state for `batch` streams: zeros, i.e. silence before the first frame; the
        rings have a row per stream, so `step` runs on it with slots None."""
        param = next(self.parameters())
        specs = self.state_spec() | self.ring_spec()
        return {
            key: torch.zeros((batch, *shape), dtype=dtype or param.dtype, device=param.device)
            for key, (shape, dtype) in specs.items()
        }

    # ---------------------------------------------------------------- decode
    def step(
        self, codes: torch.Tensor, state: State, slots: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next frames of B streams: codes [B, n, Q] (int64) -> float32 [B, n * 1920].

        `state` (from `initial_state`, or gathered per stream) is replaced in place by the
        state after these frames; its rings (`ring_spec`) are updated in place in the rows
        `slots` [B] int64 names (None: rows 0..B-1, as `initial_state` makes them).
        """
        if slots is None:
            slots = torch.arange(codes.shape[0], device=self.device)
        # Channels-last from here on: [B, samples, channels].
        h = self.quantizer.decode(codes).to(self.dtype)
        route = self.route
        h, _ = route.conv(self.pre_conv, h, state)
        h = self.pre_transformer(h, state, slots)
        for transposed, convnext in self.upsample:
            h, _ = route.conv(transposed, h, state)
            h = convnext(h, state, route)
        # Each convolution applies the activation its successor's input needs.
        first, *blocks, last_activation, last = self.decoder
        _, h = route.conv(first, h, state, activation=blocks[0].activation, emit_raw=False)
        followers = [b.activation for b in blocks[1:]] + [last_activation]
        heads = [None] * (len(blocks) - 1) + [last]  # the last block runs the last conv
        for block, follower, head in zip(blocks, followers, heads, strict=True):
            h = block(h, state, follower, route, head)
        return h.clamp(-1.0, 1.0).squeeze(2).float()

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, chunk_frames: int = 128) -> torch.Tensor:
        """Offline decode: codes [B, T, Q] -> float32 waveform [B, T * 1920] in [-1, 1].

        Runs in chunks of `chunk_frames` only to bound activation memory; the result is the
        same as one pass.
        """
        state = self.initial_state(codes.shape[0])
        codes = codes.to(self.device)
        return torch.cat(
            [
                self.step(codes[:, i : i + chunk_frames], state)
                for i in range(0, codes.shape[1], chunk_frames)
            ],
            dim=1,
        )

    @property
    def dtype(self) -> torch.dtype:
        return self.pre_conv.conv.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.pre_conv.conv.weight.device


def load_speech_tokenizer(
    directory: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    route: ConvRoute = EAGER,
    attention: str | None = None,
) -> CodecDecoder:
    """The decoder half of an official `speech_tokenizer/` folder (config.json + safetensors),
    its convolutions on `route` (see `CodecDecoder`).

    Encoder tensors (voice cloning) are present in the folder and ignored here.
    """
    from safetensors import safe_open

    directory = Path(directory)
    cfg = SpeechTokenizerConfig.from_dir(directory)
    # Made on the device, not on "meta": the layouts the modules derive as they are made
    # would be arithmetic on meta tensors, whose first use imports Dynamo and Inductor
    # (3-4 s of a server's start; tests/codec/test_decoder_load.py).
    with torch.device(device):
        decoder = CodecDecoder(cfg.decoder, route, attention)
    tensors: dict[str, torch.Tensor] = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is no dict: it has keys(), no __iter__)
                if name.startswith(CHECKPOINT_PREFIX):
                    tensors[name[len(CHECKPOINT_PREFIX) :]] = f.get_tensor(name)
    if not tensors:
        raise FileNotFoundError(f"no decoder tensors in {directory}/*.safetensors")
    decoder.load_state_dict(tensors, strict=True, assign=True)
    # Not in the checkpoint; and it must stay float32 when the rest is cast.
    inv_freq = rope_inverse_frequencies(cfg.decoder.head_dim, cfg.decoder.rope_theta)
    decoder.to(device=device, dtype=dtype)
    decoder.pre_transformer.inv_freq = inv_freq.to(device)
    return decoder.eval().requires_grad_(False)
