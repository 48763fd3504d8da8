"""Tensor names and shapes of the speech tokenizer's encoder (a Mimi model).

Synthesis never runs the encoder, but the official `speech_tokenizer/` folder carries it
(Base models use it to encode a reference voice), so the random writer writes it too and
a folder from the writer looks like a downloaded one. Derived from the `encoder_config`
keys; a test compares it with the reference model's state dict.
"""

from __future__ import annotations

import math
from typing import Any

PREFIX = "encoder."


def _conv(out: dict, name: str, c_out: int, c_in: int, kernel: int, bias: bool = True) -> None:
    out[f"{name}.conv.weight"] = (c_out, c_in, kernel)
    if bias:
        out[f"{name}.conv.bias"] = (c_out,)


def encoder_tensor_shapes(enc: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Official name (with the `encoder.` prefix) -> shape, for one encoder_config."""
    out: dict[str, tuple[int, ...]] = {}
    seanet = "encoder.encoder.layers"
    dim = enc["num_filters"]
    _conv(out, f"{seanet}.0", dim, enc["audio_channels"], enc["kernel_size"])
    index = 1
    for ratio in reversed(enc["upsampling_ratios"]):
        for _ in range(enc["num_residual_layers"]):
            hidden = dim // enc["compress"]
            _conv(out, f"{seanet}.{index}.block.1", hidden, dim, enc["residual_kernel_size"])
            _conv(out, f"{seanet}.{index}.block.3", dim, hidden, 1)
            index += 1
        index += 1  # ELU
        _conv(out, f"{seanet}.{index}", dim * 2, dim, 2 * ratio)
        dim *= 2
        index += 1
    index += 1  # ELU
    _conv(out, f"{seanet}.{index}", enc["hidden_size"], dim, enc["last_kernel_size"])

    h, hd = enc["hidden_size"], enc["head_dim"]
    for i in range(enc["num_hidden_layers"]):
        p = f"encoder.encoder_transformer.layers.{i}"
        out[f"{p}.self_attn.q_proj.weight"] = (enc["num_attention_heads"] * hd, h)
        out[f"{p}.self_attn.k_proj.weight"] = (enc["num_key_value_heads"] * hd, h)
        out[f"{p}.self_attn.v_proj.weight"] = (enc["num_key_value_heads"] * hd, h)
        out[f"{p}.self_attn.o_proj.weight"] = (h, enc["num_attention_heads"] * hd)
        out[f"{p}.mlp.fc1.weight"] = (enc["intermediate_size"], h)
        out[f"{p}.mlp.fc2.weight"] = (h, enc["intermediate_size"])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            out[f"{p}.{norm}.weight"] = (h,)
            out[f"{p}.{norm}.bias"] = (h,)
        out[f"{p}.self_attn_layer_scale.scale"] = (h,)
        out[f"{p}.mlp_layer_scale.scale"] = (h,)

    # Mimi runs its SEANet at sampling_rate / prod(ratios) frames a second and strides
    # down to the tokenizer's frame rate.
    encodec_rate = enc["sampling_rate"] / math.prod(enc["upsampling_ratios"])
    stride = int(encodec_rate / enc["_frame_rate"])
    _conv(out, "encoder.downsample", h, h, 2 * stride, bias=False)

    vq_dim = enc["vector_quantization_hidden_dimension"]
    n_semantic = enc["num_semantic_quantizers"]
    halves = {
        "semantic_residual_vector_quantizer": n_semantic,
        "acoustic_residual_vector_quantizer": enc["num_quantizers"] - n_semantic,
    }
    for half, n in halves.items():
        p = f"encoder.quantizer.{half}"
        for i in range(n):
            out[f"{p}.layers.{i}.codebook.initialized"] = (1,)
            out[f"{p}.layers.{i}.codebook.cluster_usage"] = (enc["codebook_size"],)
            out[f"{p}.layers.{i}.codebook.embed_sum"] = (enc["codebook_size"], enc["codebook_dim"])
        out[f"{p}.input_proj.weight"] = (vq_dim, h, 1)
        out[f"{p}.output_proj.weight"] = (h, vq_dim, 1)
    return out
