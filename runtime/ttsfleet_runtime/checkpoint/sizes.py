"""Dimensions of the released Qwen3-TTS-12Hz models, their 25 Hz counterparts, and a
tiny one for CPU tests.

0.6B and 1.7B follow the published config.json files (they differ only in the
talker's width); `tiny` keeps every vocabulary and token id of the real models
(so prompts, codes and the codec interface are the real ones) but shrinks the
transformer stacks until a checkpoint is written in well under a second.

The tokenizer rate decides the talker's codec vocabulary: the speech tokenizer's
codebook, then 1,024 ids that start with the special codec tokens (the reference
suppresses the top 1,024 ids but EOS while sampling, so that layout is fixed). 12 Hz
frames have 16 code groups (the code predictor fills 15 of them); 25 Hz frames one.
"""

from __future__ import annotations

import copy
from typing import Any

from ..model.config import TOKENIZER_TYPES

SIZES = ("tiny", "0.6B", "1.7B")
VARIANTS = ("Base", "CustomVoice", "VoiceDesign")
MODEL_TYPE = {"Base": "base", "CustomVoice": "custom_voice", "VoiceDesign": "voice_design"}
MODEL_SIZE = {"tiny": "tiny", "0.6B": "0b6", "1.7B": "1b7"}

SPEAKER_IDS = {
    "serena": 3066,
    "vivian": 3065,
    "uncle_fu": 3010,
    "ryan": 3061,
    "aiden": 2861,
    "ono_anna": 2873,
    "sohee": 2864,
    "eric": 2875,
    "dylan": 2878,
}
SPEAKER_DIALECT: dict[str, str | bool] = {k: False for k in SPEAKER_IDS}
SPEAKER_DIALECT.update({"eric": "sichuan_dialect", "dylan": "beijing_dialect"})
LANGUAGE_IDS = {
    "chinese": 2055,
    "english": 2050,
    "german": 2053,
    "italian": 2070,
    "portuguese": 2071,
    "spanish": 2054,
    "japanese": 2058,
    "korean": 2064,
    "french": 2061,
    "russian": 2069,
    "beijing_dialect": 2074,
    "sichuan_dialect": 2062,
}

# Text special tokens of the Qwen2 vocabulary the prompt format uses.
SPECIAL_TOKENS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<tts_pad>": 151671,
    "<tts_text_bos>": 151672,
    "<tts_text_eod>": 151673,
}

TOKENIZER_RATES = tuple(TOKENIZER_TYPES)  # 12, 25
# Codes in a frame's (first) codebook. 12 Hz as published; no 25 Hz checkpoint is
# published, so 25 Hz takes the 25 Hz tokenizer's `audio_vq_codebook_size` default in
# qwen-tts 0.1.1. The speech tokenizer writer reads it from here too.
CODEBOOK_SIZE = {12: 2048, 25: 32768}
CODE_GROUPS = {12: 16, 25: 1}
# Talker positions per second of audio (12.5 Hz rounds up, as published).
POSITIONS_PER_SECOND = {12: 13, 25: 25}
# Special codec ids are the codebook size plus these offsets.
_CODEC_SPECIAL_OFFSETS = dict(
    codec_bos_id=101,
    codec_eos_token_id=102,
    codec_think_id=106,
    codec_nothink_id=107,
    codec_pad_id=100,
    codec_think_bos_id=108,
    codec_think_eos_id=109,
)
_CODEC_SPECIAL_SPAN = 1024


def codec_vocabulary(tokenizer_rate_hz: int) -> dict[str, int]:
    """The talker's codec vocabulary size and special codec ids at a tokenizer rate."""
    codebook = CODEBOOK_SIZE[tokenizer_rate_hz]
    ids = {name: codebook + offset for name, offset in _CODEC_SPECIAL_OFFSETS.items()}
    return dict(ids, vocab_size=codebook + _CODEC_SPECIAL_SPAN)


# The talker and predictor configs below are the 12 Hz ones; `model_config` sets what
# the tokenizer rate changes (the keys keep their published order in config.json).
_CODEC_12HZ = codec_vocabulary(12)

_PREDICTOR = dict(
    attention_bias=False,
    head_dim=128,
    hidden_act="silu",
    hidden_size=1024,
    intermediate_size=3072,
    max_position_embeddings=65536,
    num_attention_heads=16,
    num_code_groups=CODE_GROUPS[12],
    num_hidden_layers=5,
    num_key_value_heads=8,
    rms_norm_eps=1e-6,
    rope_theta=1000000,
    vocab_size=CODEBOOK_SIZE[12],
    use_sliding_window=False,
    model_type="qwen3_tts_talker_code_predictor",
)

_TALKER = dict(
    attention_bias=False,
    attention_dropout=0,
    **{k: v for k, v in _CODEC_12HZ.items() if k != "vocab_size"},
    head_dim=128,
    hidden_act="silu",
    hidden_size=2048,
    intermediate_size=6144,
    max_position_embeddings=32768,
    num_attention_heads=16,
    num_code_groups=CODE_GROUPS[12],
    num_hidden_layers=28,
    num_key_value_heads=8,
    position_id_per_seconds=POSITIONS_PER_SECOND[12],
    rms_norm_eps=1e-6,
    rope_scaling={
        "interleaved": True,
        "mrope_section": [24, 20, 20],
        "rope_type": "default",
        "type": "default",
    },
    rope_theta=1000000,
    text_hidden_size=2048,
    text_vocab_size=151936,
    vocab_size=_CODEC_12HZ["vocab_size"],
    use_sliding_window=False,
    model_type="qwen3_tts_talker",
)

_TINY_TALKER = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    text_hidden_size=32,
    rope_scaling={
        "interleaved": True,
        "mrope_section": [4, 2, 2],
        "rope_type": "default",
        "type": "default",
    },
)
_TINY_PREDICTOR = dict(
    hidden_size=48,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=12,
)
# The speaker encoder of tiny Base checkpoints: the reference's ECAPA-TDNN, narrower. The
# mel front end (128 bins) is fixed by the reference's `extract_speaker_embedding`.
_TINY_SPEAKER_ENCODER = dict(
    enc_channels=[32, 32, 32, 32, 96],
    enc_attention_channels=16,
    enc_se_channels=16,
)


def model_config(size: str, variant: str, tokenizer_rate_hz: int = 12) -> dict[str, Any]:
    """The config.json of a Qwen3-TTS checkpoint of this size, variant and tokenizer rate."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {SIZES}")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    if tokenizer_rate_hz not in TOKENIZER_RATES:
        raise ValueError(
            f"unknown tokenizer rate {tokenizer_rate_hz!r} Hz; choose one of {TOKENIZER_RATES}"
        )
    talker = copy.deepcopy(_TALKER)
    predictor = copy.deepcopy(_PREDICTOR)
    talker.update(
        codec_vocabulary(tokenizer_rate_hz),
        num_code_groups=CODE_GROUPS[tokenizer_rate_hz],
        position_id_per_seconds=POSITIONS_PER_SECOND[tokenizer_rate_hz],
    )
    # The predictor's heads predict codes of one codebook (no special ids).
    predictor.update(
        num_code_groups=CODE_GROUPS[tokenizer_rate_hz], vocab_size=CODEBOOK_SIZE[tokenizer_rate_hz]
    )
    if size == "0.6B":
        talker.update(hidden_size=1024, intermediate_size=3072)
    elif size == "tiny":
        talker.update(_TINY_TALKER)
        predictor.update(_TINY_PREDICTOR)
    talker["code_predictor_config"] = predictor
    # Language and speaker ids are codec ids above the codebook, like the special ones:
    # the published (12 Hz) numbers, moved up with a larger codebook so no id is a code.
    shift = CODEBOOK_SIZE[tokenizer_rate_hz] - CODEBOOK_SIZE[12]
    talker["codec_language_id"] = {k: v + shift for k, v in LANGUAGE_IDS.items()}
    custom = variant == "CustomVoice"
    talker["spk_id"] = {k: v + shift for k, v in SPEAKER_IDS.items()} if custom else {}
    talker["spk_is_dialect"] = dict(SPEAKER_DIALECT) if custom else {}
    config: dict[str, Any] = dict(
        architectures=["Qwen3TTSForConditionalGeneration"],
        model_type="qwen3_tts",
        talker_config=talker,
        tokenizer_type=TOKENIZER_TYPES[tokenizer_rate_hz],
        tts_model_size=MODEL_SIZE[size],
        tts_model_type=MODEL_TYPE[variant],
        im_start_token_id=SPECIAL_TOKENS["<|im_start|>"],
        im_end_token_id=SPECIAL_TOKENS["<|im_end|>"],
        tts_pad_token_id=SPECIAL_TOKENS["<tts_pad>"],
        tts_bos_token_id=SPECIAL_TOKENS["<tts_text_bos>"],
        tts_eos_token_id=SPECIAL_TOKENS["<tts_text_eod>"],
        torch_dtype="bfloat16",
    )
    if variant == "Base":
        # As published: the embedding is as wide as the talker (it takes a speaker
        # token's place in the prompt); the rest are the reference's defaults.
        config["speaker_encoder_config"] = dict(
            enc_dim=talker["hidden_size"],
            sample_rate=24000,
            **(_TINY_SPEAKER_ENCODER if size == "tiny" else {}),
        )
    return config


GENERATION_CONFIG = dict(
    do_sample=True,
    top_k=50,
    top_p=1.0,
    temperature=0.9,
    repetition_penalty=1.05,
    subtalker_dosample=True,
    subtalker_top_k=50,
    subtalker_top_p=1.0,
    subtalker_temperature=0.9,
    max_new_tokens=8192,
)
