"""The official tensor names and shapes of a Qwen3-TTS checkpoint.

The one place that knows how `model.safetensors` is laid out: the random
checkpoint writer creates exactly these tensors and the loader reads them.
"""

from __future__ import annotations

from .config import DecoderConfig, TTSConfig


def _decoder_layers(prefix: str, c: DecoderConfig) -> dict[str, tuple[int, ...]]:
    h, d = c.hidden_size, c.head_dim
    shapes: dict[str, tuple[int, ...]] = {}
    for i in range(c.num_hidden_layers):
        p = f"{prefix}.layers.{i}"
        shapes[f"{p}.self_attn.q_proj.weight"] = (c.num_attention_heads * d, h)
        shapes[f"{p}.self_attn.k_proj.weight"] = (c.num_key_value_heads * d, h)
        shapes[f"{p}.self_attn.v_proj.weight"] = (c.num_key_value_heads * d, h)
        shapes[f"{p}.self_attn.o_proj.weight"] = (h, c.num_attention_heads * d)
        shapes[f"{p}.self_attn.q_norm.weight"] = (d,)
        shapes[f"{p}.self_attn.k_norm.weight"] = (d,)
        shapes[f"{p}.mlp.gate_proj.weight"] = (c.intermediate_size, h)
        shapes[f"{p}.mlp.up_proj.weight"] = (c.intermediate_size, h)
        shapes[f"{p}.mlp.down_proj.weight"] = (h, c.intermediate_size)
        shapes[f"{p}.input_layernorm.weight"] = (h,)
        shapes[f"{p}.post_attention_layernorm.weight"] = (h,)
    shapes[f"{prefix}.norm.weight"] = (h,)
    return shapes


def tensor_shapes(cfg: TTSConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every talker tensor (a Base checkpoint's speaker encoder:
    `speaker_encoder.speaker_encoder_shapes`)."""
    t = cfg.talker
    p = t.code_predictor
    assert p is not None
    shapes = _decoder_layers("talker.model", t)
    shapes["talker.model.codec_embedding.weight"] = (t.vocab_size, t.hidden_size)
    shapes["talker.model.text_embedding.weight"] = (t.text_vocab_size, t.text_hidden_size)
    shapes["talker.codec_head.weight"] = (t.vocab_size, t.hidden_size)
    shapes["talker.text_projection.linear_fc1.weight"] = (t.text_hidden_size, t.text_hidden_size)
    shapes["talker.text_projection.linear_fc1.bias"] = (t.text_hidden_size,)
    shapes["talker.text_projection.linear_fc2.weight"] = (t.hidden_size, t.text_hidden_size)
    shapes["talker.text_projection.linear_fc2.bias"] = (t.hidden_size,)
    shapes.update(_decoder_layers("talker.code_predictor.model", p))
    for g in range(p.num_code_groups - 1):
        # The predictor's code embeddings live in the talker's width; its own
        # width is reached through small_to_mtp_projection.
        shapes[f"talker.code_predictor.model.codec_embedding.{g}.weight"] = (
            p.vocab_size,
            t.hidden_size,
        )
        shapes[f"talker.code_predictor.lm_head.{g}.weight"] = (p.vocab_size, p.hidden_size)
    if p.hidden_size != t.hidden_size:
        shapes["talker.code_predictor.small_to_mtp_projection.weight"] = (
            p.hidden_size,
            t.hidden_size,
        )
        shapes["talker.code_predictor.small_to_mtp_projection.bias"] = (p.hidden_size,)
    return shapes
