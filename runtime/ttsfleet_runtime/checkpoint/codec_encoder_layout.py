"""Tensor names and shapes of the speech tokenizer's encoder (a Mimi model).

Base models run the encoder to turn a reference voice into codes
(speech_tokenizer/rate12/encoder.py), and
the official `speech_tokenizer/` folder carries it for every variant, so the random
writer writes it too and a folder from the writer looks like a downloaded one. The
names and shapes are our encoder module's, with every codebook of the config (the
encoder computes only the first `encoder_valid_num_quantizers`) and the quantizers'
output projections (Mimi's decoding direction, which the encoder never runs); a test
compares them with the reference model's state dict.
"""

from __future__ import annotations

from typing import Any

import torch

from ..speech_tokenizer.rate12.config import CodecEncoderConfig
from ..speech_tokenizer.rate12.encoder import CHECKPOINT_PREFIX, CodecEncoder


def encoder_tensor_shapes(enc: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Official name (with the `encoder.` prefix) -> shape, for one encoder_config."""
    cfg = CodecEncoderConfig.from_dict(enc)
    with torch.device("meta"):
        encoder = CodecEncoder(cfg, enc["num_quantizers"])
    out = {CHECKPOINT_PREFIX + k: tuple(v.shape) for k, v in encoder.state_dict().items()}
    for half in ("semantic_residual_vector_quantizer", "acoustic_residual_vector_quantizer"):
        out[f"{CHECKPOINT_PREFIX}quantizer.{half}.output_proj.weight"] = (
            cfg.hidden_size,
            cfg.vector_quantization_hidden_dimension,
            1,
        )
    return out
