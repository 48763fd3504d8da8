"""The 25 Hz decoder, offline: codes [B, T] -> a waveform per stream.

`Decoder25Hz` holds the DiT mel generator (`dit`) and the BigVGAN vocoder (`bigvgan`),
named as the `decoder.*` tensors of the speech tokenizer's model.safetensors so they load
by name. `decode` pads the batch to its longest stream (padding code -1, as the reference
marks it) and honours each stream's own length: the DiT never attends to padding, and the
vocoder (not causal) runs on each stream's own mel, one batch per distinct length. A
stream's audio is therefore the audio of decoding it alone.

The flow-matching noise is an input, not a draw from the global RNG: the caller decides
it (the parity tests draw the reference's, the streaming decoder reads a fixed table).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from .config import SpeechTokenizer25HzConfig, read_config
from .mel_generator import MelGenerator
from .vocoder import Vocoder

TENSOR_PREFIX = "decoder."


@dataclasses.dataclass(frozen=True)
class DecoderVoice:
    """The decoder's conditioning for one stream."""

    xvector: torch.Tensor  # [192] float32, L2-normalised
    ref_mel: torch.Tensor  # [T_ref, 80] float32


@dataclasses.dataclass(frozen=True)
class SpeakerCondition:
    """A voice as the DiT consumes it, computed once per voice."""

    speaker: torch.Tensor  # [enc_dim]: the reference mel's encoding
    xvector: torch.Tensor  # [enc_emb_dim]


class CheckpointMismatch(ValueError):
    """The safetensors file's decoder tensors are not the ones the config describes."""


class Decoder25Hz(nn.Module):
    def __init__(self, config: SpeechTokenizer25HzConfig, fused_kernels: bool = False):
        super().__init__()
        self.config = config
        self.dit = MelGenerator(config.mel_generator, fused_kernels)
        self.bigvgan = Vocoder(config.vocoder, fused_kernels)

    @property
    def samples_per_code(self) -> int:
        return self.config.samples_per_code

    @property
    def device(self) -> torch.device:
        return self.dit.proj_out.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.dit.proj_out.weight.dtype

    @torch.no_grad()
    def condition(self, voice: DecoderVoice | None) -> SpeakerCondition:
        """The DiT's speaker inputs: a voice without reference gets what the unguided
        half of classifier-free guidance sees (zeros)."""
        device, dtype = self.device, self.dtype
        if voice is None:
            return SpeakerCondition(
                self.dit.unconditioned_speaker(device, dtype),
                torch.zeros(self.config.mel_generator.enc_emb_dim, device=device, dtype=dtype),
            )
        ref_mel = voice.ref_mel.to(device, dtype)
        speaker = self.dit.encode_reference(ref_mel.unsqueeze(0))[0]
        return SpeakerCondition(speaker, voice.xvector.to(device, dtype))

    @torch.no_grad()
    def generate_mel(
        self,
        codes: torch.Tensor,
        conditions: list[SpeakerCondition],
        noise: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """codes [B, T] (-1 = padding), noise [B, >= T * repeats, mel_dim] -> (mel [B,
        T * repeats, mel_dim], mel frame counts [B])."""
        repeats = self.config.mel_generator.repeats
        codes = codes.to(self.device)
        frames = (codes >= 0).sum(dim=1) * repeats
        length = codes.shape[1] * repeats
        if noise.shape[1] < length:
            raise ValueError(f"noise has {noise.shape[1]} frames, the codes need {length}")
        key_valid = torch.arange(length, device=self.device).unsqueeze(0) < frames.unsqueeze(1)
        mel = self.dit.sample(
            codes.clamp(min=0),
            noise[:, :length].to(self.device, self.dtype),
            torch.stack([c.speaker for c in conditions]),
            torch.stack([c.xvector for c in conditions]),
            key_valid,
        )
        return mel, frames

    @torch.no_grad()
    def vocode(self, mel: torch.Tensor, frames: torch.Tensor) -> list[torch.Tensor]:
        """mel [B, T, mel_dim] and each stream's frame count -> float32 waveforms, each
        vocoded on its own frames only (streams of one length share a batch)."""
        out: list[torch.Tensor | None] = [None] * mel.shape[0]
        counts = frames.tolist()
        for count in sorted(set(counts)):
            rows = [i for i, c in enumerate(counts) if c == count]
            if count == 0:
                for i in rows:
                    out[i] = torch.zeros(0, dtype=torch.float32, device=mel.device)
                continue
            audio = self.bigvgan(mel[rows, :count]).float()
            for i, wave in zip(rows, audio, strict=True):
                out[i] = wave
        return out

    @torch.no_grad()
    def decode(
        self,
        codes: torch.Tensor,
        voices: list[DecoderVoice | None],
        noise: torch.Tensor,
    ) -> list[torch.Tensor]:
        """codes [B, T] long (-1 pads shorter streams), one voice per stream, noise
        [B, >= T * repeats, mel_dim] -> per stream float32 audio of
        (its codes) * samples_per_code samples."""
        if codes.dim() != 2:
            raise ValueError(f"codes must be [B, T], got {tuple(codes.shape)}")
        if len(voices) != codes.shape[0]:
            raise ValueError(f"{codes.shape[0]} streams but {len(voices)} voices")
        conditions = [self.condition(v) for v in voices]
        mel, frames = self.generate_mel(codes, conditions, noise)
        return self.vocode(mel, frames)


def load_speech_tokenizer_25hz(
    folder: str | Path,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    fused_kernels: bool | None = None,
) -> Decoder25Hz:
    """The decoder of a speech tokenizer folder (config.json + model.safetensors).
    `fused_kernels` (default: on a CUDA device): the DiT's elementwise steps and the
    vocoder's anti-aliased activations as Triton kernels (`MelGenerator`, `Vocoder`)."""
    folder = Path(folder)
    config = read_config(folder)
    if fused_kernels is None:
        fused_kernels = device is not None and torch.device(device).type == "cuda"
    decoder = Decoder25Hz(config, fused_kernels)
    expected = decoder.state_dict()
    path = folder / "model.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    tensors: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            if key.startswith(TENSOR_PREFIX):
                tensors[key[len(TENSOR_PREFIX) :]] = f.get_tensor(key)
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    wrong_shape = sorted(
        f"{k} {tuple(tensors[k].shape)} != {tuple(expected[k].shape)}"
        for k in set(tensors) & set(expected)
        if tensors[k].shape != expected[k].shape
    )
    if missing or unexpected or wrong_shape:
        raise CheckpointMismatch(
            f"{path}: decoder tensors do not match config.json: "
            f"missing {_few(missing)}; unexpected {_few(unexpected)}; "
            f"wrong shape {_few(wrong_shape)}"
        )
    decoder.load_state_dict(tensors)
    decoder.eval()
    return decoder.to(device=device, dtype=dtype)


def _few(names: list[str], shown: int = 8) -> str:
    if not names:
        return "none"
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(f"{TENSOR_PREFIX}{n}" for n in names[:shown]) + more
