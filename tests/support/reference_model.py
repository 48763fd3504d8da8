"""Loads the official `qwen-tts` modules (the reference) onto our checkpoints: the
TTS model (talker, code predictor, speaker encoder) and the 12 Hz speech tokenizer.

qwen_tts imports librosa, soundfile, sox, onnxruntime, torchaudio and einops at
module level for audio file I/O, mel features and the 25 Hz tokenizer, none of
which the talker or code predictor touch; where they are not installed they are
replaced by empty stand-ins so the reference modules import. Nothing the parity tests compare runs through them.
"""

from __future__ import annotations

import functools
import importlib
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


@functools.lru_cache(maxsize=4)
def reference_model(checkpoint: Path):
    """The reference Qwen3TTSForConditionalGeneration, float32, eager attention,
    with the checkpoint's weights."""
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
    missing, unexpected = model.load_state_dict(
        {k: v.float() for k, v in state.items()}, strict=False
    )
    assert not unexpected, unexpected
    assert not [k for k in missing if not k.startswith("speaker_encoder.")], missing
    return model


def reference_tokenizer_modules():
    """The reference 12 Hz tokenizer modules from the installed `qwen-tts` package.

    Imported as a stand-alone package so that `qwen_tts/__init__` (which pulls in
    librosa, sox and the whole inference stack) never runs; the two files themselves
    need only torch and transformers.
    """
    origin = reference.reference_origin()
    reference.require("transformers")
    name = "_qwen_tts_tokenizer_12hz_reference"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(origin).parent / "core" / "tokenizer_12hz")]
        sys.modules[name] = package
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    if "default" not in ROPE_INIT_FUNCTIONS:  # transformers 5 dropped it (qwen-tts-hf shim)
        importlib.import_module("qwen_tts._transformers_compat").patch_transformers_rope_registry()
    config = importlib.import_module(f"{name}.configuration_qwen3_tts_tokenizer_v2")
    modeling = importlib.import_module(f"{name}.modeling_qwen3_tts_tokenizer_v2")
    return config, modeling


def build_reference_speech_tokenizer(raw: dict):
    """The reference Qwen3TTSTokenizerV2Model for a speech_tokenizer/config.json (as a
    dict), randomly initialised, eager attention."""
    config_module, modeling = reference_tokenizer_modules()
    cfg = config_module.Qwen3TTSTokenizerV2Config(
        **{k: v for k, v in raw.items() if k not in ("architectures", "model_type")}
    )
    for sub in (cfg, cfg.encoder_config, cfg.decoder_config):
        sub._attn_implementation = "eager"
    return modeling.Qwen3TTSTokenizerV2Model(cfg)


@functools.lru_cache(maxsize=4)
def reference_speech_tokenizer(folder: Path):
    """The reference speech tokenizer holding a speech_tokenizer/ folder's weights
    (strict load), float32."""
    from safetensors.torch import load_file

    model = build_reference_speech_tokenizer(json.loads((folder / "config.json").read_text()))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    return model.float().eval()


def reference_cloned_voice(checkpoint: Path, seconds: float, transcript: str | None, seed: int = 0):
    """A `ClonedVoice` computed by the reference for a random recording of `seconds`:
    its speaker encoder's embedding and, with a transcript, its speech tokenizer's
    codes (in-context cloning). The reference's `extract_speaker_embedding` builds
    the log-mel input with librosa, which is not installed here: the encoder reads a
    random log-mel spectrogram of the recording's length instead (these tests are
    about what the prompt does with an embedding, not how the encoder makes one)."""
    import torch

    from ttsfleet_runtime.engine.api import ClonedVoice

    gen = torch.Generator().manual_seed(seed)
    samples = int(seconds * 24000)
    mels = torch.randn(1, samples // 256, 128, generator=gen)
    audio = (torch.rand(1, samples, generator=gen) - 0.5) * 0.4
    with torch.no_grad():
        embedding = reference_model(checkpoint).speaker_encoder(mels)[0]
        codes = None
        if transcript is not None:
            tokenizer = reference_speech_tokenizer(checkpoint / "speech_tokenizer")
            mask = torch.ones_like(audio, dtype=torch.long)
            codes = tokenizer.encode(audio, padding_mask=mask).audio_codes[0].numpy()
    return ClonedVoice(
        speaker_embedding=embedding.numpy(),
        ref_codes=codes,
        ref_text=transcript,
        model=checkpoint.name,
    )
