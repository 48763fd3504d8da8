"""Writes a `speech_tokenizer/` folder in the official layout with random weights.

No weights can be downloaded where this project is built and tested, so tests and
benchmarks run on folders written here: config.json, preprocessor_config.json and
model.safetensors with the full official tensor set (decoder and Mimi encoder), float32
like the published file. "tiny" is small enough for CPU tests; "real" has the published
dimensions (one size, shared by the 0.6B and 1.7B models).

The random values are chosen so that every part of the decoder changes the waveform
(residual scales well above their trained-init values, output mostly inside [-1, 1]),
which makes parity tests sensitive to mistakes anywhere in the chain.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from ..speech_tokenizer.rate12.config import SpeechTokenizerConfig, speech_tokenizer_config
from ..speech_tokenizer.rate12.decoder import CHECKPOINT_PREFIX, CodecDecoder
from .codec_encoder_layout import encoder_tensor_shapes

PREPROCESSOR_CONFIG = {
    "feature_extractor_type": "EncodecFeatureExtractor",
    "feature_size": 1,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": True,
    "sampling_rate": 24000,
}


def _random_tensor(name: str, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    def normal(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    leaf = name.rsplit(".", 1)[-1]
    if leaf == "cluster_usage":  # EMA counts: positive
        return torch.rand(shape, generator=gen) * 1.5 + 0.5
    if leaf in ("embedding_sum", "embed_sum"):
        return normal(1.0)
    if leaf == "initialized":
        return torch.ones(shape)
    if leaf in ("alpha", "beta"):  # SnakeBeta, log scale
        return normal(0.3)
    if leaf in ("scale", "gamma"):  # layer scales
        return 0.3 + normal(0.1)
    if "norm" in name and leaf == "weight":
        return 1.0 + normal(0.1)
    if leaf == "bias":
        return normal(0.02)
    # Weights: variance-preserving for the fan-in.
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    if name.startswith("decoder.decoder.") and (shape[0] == 1 or ".conv2." in name):
        # Residual branches and the output conv: keep the waveform mostly unclamped.
        return normal(0.3 / math.sqrt(fan_in))
    return normal(1.0 / math.sqrt(fan_in))


def decoder_tensor_shapes(cfg: SpeechTokenizerConfig) -> dict[str, tuple[int, ...]]:
    with torch.device("meta"):
        decoder = CodecDecoder(cfg.decoder)
    return {CHECKPOINT_PREFIX + k: tuple(v.shape) for k, v in decoder.state_dict().items()}


def write_random_speech_tokenizer(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write config.json, preprocessor_config.json and model.safetensors to out_dir."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = speech_tokenizer_config(size)
    gen = torch.Generator().manual_seed(seed)
    shapes = {**encoder_tensor_shapes(cfg.encoder), **decoder_tensor_shapes(cfg)}
    tensors = {
        name: _random_tensor(name, shape, gen).float().contiguous()
        for name, shape in sorted(shapes.items())
    }
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")
    return out
