"""Writes a Qwen3-TTS checkpoint with random weights in the official layout.

No weights can be downloaded here, yet tests and benchmarks need checkpoints
that load exactly like the released ones: same config keys, same tensor names
and shapes, same tokenizer files, same `speech_tokenizer/` folder.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from ..model.config import TTSConfig
from ..model.speaker_encoder import CHECKPOINT_PREFIX as SPEAKER_ENCODER_PREFIX
from ..model.speaker_encoder import speaker_encoder_shapes
from ..model.tensor_layout import tensor_shapes
from .sizes import GENERATION_CONFIG, model_config
from .text_tokenizer_files import write_text_tokenizer

log = logging.getLogger(__name__)

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def random_tensor(
    name: str, shape: tuple[int, ...], gen: torch.Generator, device: str
) -> torch.Tensor:
    """Initialise like the reference's `_init_weights`: N(0, 0.02) matrices,
    unit norms, zero biases. The speaker encoder's convolutions are variance-preserving
    instead, with small random biases: an embedding that N(0, 0.02) shrinks to nearly
    nothing would let a parity test pass whatever the code computes."""
    if name.startswith(SPEAKER_ENCODER_PREFIX):
        if name.endswith(".bias"):
            return torch.randn(shape, generator=gen, device=device) * 0.1
        fan_in = math.prod(shape[1:])
        return torch.randn(shape, generator=gen, device=device) / math.sqrt(fan_in)
    if name.endswith("norm.weight"):
        return torch.ones(shape, device=device)
    if name.endswith(".bias"):
        return torch.zeros(shape, device=device)
    return torch.randn(shape, generator=gen, device=device) * 0.02


def write_random_checkpoint(
    out_dir: str | Path,
    size: str = "tiny",
    variant: str = "CustomVoice",
    *,
    seed: int = 0,
    dtype: str | None = None,
    device: str = "cpu",
    with_speech_tokenizer: bool = True,
    tokenizer_rate_hz: int = 12,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Write config.json, generation_config.json, model.safetensors (with the speaker
    encoder for Base), the text tokenizer and speech_tokenizer/ into `out_dir`; return
    the folder. `tokenizer_rate_hz` picks the speech tokenizer (12 or 25 Hz) and with it
    the talker's codec vocabulary and code groups.

    Tiny checkpoints default to float32 (exact CPU parity tests), real sizes
    to bfloat16 (the released dtype)."""
    t0 = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = progress or (lambda msg: log.info(msg, extra={"checkpoint": str(out)}))
    config = model_config(size, variant, tokenizer_rate_hz)
    dtype = dtype or ("float32" if size == "tiny" else "bfloat16")
    config["torch_dtype"] = dtype
    (out / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    write_text_tokenizer(out)

    parsed = TTSConfig.from_dict(config)
    shapes = {**tensor_shapes(parsed), **speaker_encoder_shapes(parsed)}
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    total = sum(_numel(s) for s in shapes.values())
    done = 0
    for i, (name, shape) in enumerate(shapes.items()):
        tensors[name] = (
            random_tensor(name, shape, gen, device).to(_DTYPES[dtype]).cpu().contiguous()
        )
        done += _numel(shape)
        if i % 50 == 0:
            say(f"random weights: {done / 1e6:.0f}M of {total / 1e6:.0f}M parameters")
    _never_say_eos(tensors, config)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    say(f"wrote {total / 1e6:.1f}M parameters to {out / 'model.safetensors'}")

    if with_speech_tokenizer:
        _write_speech_tokenizer(out / "speech_tokenizer", size, seed, tokenizer_rate_hz)
    say(f"checkpoint {size} {variant} written to {out} in {time.monotonic() - t0:.1f}s")
    return out


def _never_say_eos(tensors: dict[str, torch.Tensor], config: dict) -> None:
    """Zero the talker's EOS row, so the EOS logit is 0 whatever the hidden state.

    With N(0, 0.02) rows the EOS logit is as large as any code's, so sampling
    says EOS now and then (about once in 3,000 frames at top-k 50) and an
    utterance ends early at random: tests and benchmarks that fix the length by
    --max-audio-seconds would flake. A zero row sits at the median of the 2,048
    code logits, far below the top 50 that sampling keeps, so random weights
    never say EOS at the generation config's top-k; tests that need EOS bias it.
    """
    eos = config["talker_config"]["codec_eos_token_id"]
    tensors["talker.codec_head.weight"][eos] = 0


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _write_speech_tokenizer(out: Path, size: str, seed: int, tokenizer_rate_hz: int) -> None:
    # One "real" speech tokenizer serves both 0.6B and 1.7B.
    tokenizer_size = "tiny" if size == "tiny" else "real"
    if tokenizer_rate_hz == 25:
        from .speech_tokenizer_25hz_files import write_random_speech_tokenizer_25hz

        write_random_speech_tokenizer_25hz(out, size=tokenizer_size, seed=seed)
        return
    from .speech_tokenizer_files import write_random_speech_tokenizer

    write_random_speech_tokenizer(out, size=tokenizer_size, seed=seed)
