"""Loads the official `qwen-tts` modules (the reference) onto our checkpoints.

qwen_tts imports librosa, soundfile, sox, onnxruntime, torchaudio and einops at
module level for audio file I/O, mel features and the 25 Hz tokenizer; where they are
not installed they are replaced by empty stand-ins so the reference modules import.
librosa is a test dependency (the speaker encoder's mel filterbank and the reference's
resampling are librosa's), so the speaker-embedding parity tests run the real one;
nothing the tests compare runs through a stand-in.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import sys
import types
from pathlib import Path

from support import reference

_AUDIO_ONLY_MODULES = (
    "librosa",
    "librosa.filters",
    "soundfile",
    "sox",
    "onnxruntime",
    "einops",
    "torchaudio",
    "torchaudio.compliance",
    "torchaudio.compliance.kaldi",
)


class _Absent(types.ModuleType):
    def __getattr__(self, name):
        return None


def _stub_audio_io() -> None:
    for name in _AUDIO_ONLY_MODULES:
        try:
            __import__(name)
        except ImportError:
            stub = _Absent(name)
            # torch's import machinery asks stand-ins for a spec.
            stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
            sys.modules[name] = stub
            parent, _, child = name.rpartition(".")
            if parent:
                setattr(sys.modules[parent], child, stub)


def reference_modeling() -> types.ModuleType:
    """qwen_tts' modeling_qwen3_tts module (the model classes, mel_spectrogram)."""
    reference.require("transformers")
    _stub_audio_io()
    return reference.require("qwen_tts.core.models.modeling_qwen3_tts")


@functools.lru_cache(maxsize=2)
def reference_voice_cloner(checkpoint: Path):
    """qwen-tts' Qwen3TTSModel over a Base checkpoint, loaded by the official
    `from_pretrained` (speech tokenizer included), float32, eager attention: what
    `create_voice_clone_prompt` computes is the reference of `clone_voice`."""
    import torch

    modeling = reference_modeling()
    inference = reference.require("qwen_tts.inference.qwen3_tts_model")
    model = modeling.Qwen3TTSForConditionalGeneration.from_pretrained(
        str(checkpoint), dtype=torch.float32, attn_implementation="eager"
    )
    return inference.Qwen3TTSModel(model=model.eval(), processor=None)


@functools.lru_cache(maxsize=4)
def reference_model(checkpoint: Path):
    """The reference Qwen3TTSForConditionalGeneration, float32, eager attention, with the
    checkpoint's weights: every tensor the writer wrote, and every one the reference
    has (a strict load)."""
    reference.require("transformers")
    _stub_audio_io()
    qwen_tts = reference.require("qwen_tts.core.models")
    import torch
    from safetensors.torch import load_file

    config = json.loads((checkpoint / "config.json").read_text())
    cfg = qwen_tts.Qwen3TTSConfig(**config)
    for c in (cfg, cfg.talker_config, cfg.talker_config.code_predictor_config):
        c._attn_implementation = "eager"
    torch.manual_seed(0)
    model = qwen_tts.Qwen3TTSForConditionalGeneration(cfg).float().eval()
    state = load_file(str(checkpoint / "model.safetensors"))
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return model
