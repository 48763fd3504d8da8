"""Loads the official `qwen-tts` modules (the reference) onto our checkpoints: the
TTS model (talker, code predictor, speaker encoder) and the 12 Hz speech tokenizer.

qwen_tts imports librosa, soundfile, sox, onnxruntime, torchaudio and einops at
module level for audio file I/O, mel features and the 25 Hz tokenizer; where they are
not installed they are replaced by empty stand-ins so the reference modules import
(torchaudio's Kaldi features by a working one: support/kaldi_stand_in.py).
librosa is a test dependency (the speaker encoder's mel filterbank and the reference's
resampling are librosa's), so the speaker-embedding parity tests run the real one;
nothing the tests compare runs through a stand-in.
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
from support.kaldi_stand_in import install_kaldi_stand_in

_AUDIO_ONLY_MODULES = (
    "librosa",
    "librosa.filters",
    "soundfile",
    "sox",
    "onnxruntime",
    "einops",
)


class _Absent(types.ModuleType):
    def __getattr__(self, name):
        return None


def _stub_audio_io() -> None:
    # torchaudio (no build for our torch) gets the working Kaldi stand-in, never an empty
    # one: a reference module imported now keeps the `kaldi` it saw, and the 25 Hz
    # tests run it.
    install_kaldi_stand_in()
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


def reference_greedy_codes(checkpoint, text, speaker, instructions, language, frames):
    """The reference's own generate loop, greedy, on `checkpoint`: its first `frames`
    whole frames [frames, groups]."""
    import torch

    from ttsfleet_runtime.model.text_tokenizer import TextTokenizer

    ref = reference_model(checkpoint)
    tok = TextTokenizer.from_checkpoint(checkpoint)
    ids = torch.tensor(
        [tok.encode(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")]
    )
    instruct = None
    if instructions:
        instruct = torch.tensor([tok.encode(f"<|im_start|>user\n{instructions}<|im_end|>\n")])
    # The reference completes frame t while generating first code t+1: ask for
    # one more first code to get `frames` whole frames.
    with torch.no_grad():
        codes, _ = ref.generate(
            input_ids=[ids],
            instruct_ids=[instruct],
            languages=[language],
            speakers=[speaker],
            non_streaming_mode=False,
            max_new_tokens=frames + 1,
            do_sample=False,
            subtalker_dosample=False,
            repetition_penalty=1.05,
        )
    return codes[0]


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
    """A `ClonedVoice` computed by the reference (`create_voice_clone_prompt`, the
    official loader) for a random 24 kHz recording of `seconds`: its speaker
    embedding and, with a transcript, its speech tokenizer's codes (in-context
    cloning; without one, x-vector only)."""
    import numpy as np

    from ttsfleet_runtime.engine.api import ClonedVoice

    rng = np.random.default_rng(seed)
    audio = ((rng.random(int(seconds * 24000)) - 0.5) * 0.4).astype(np.float32)
    (item,) = reference_voice_cloner(checkpoint).create_voice_clone_prompt(
        ref_audio=(audio, 24000), ref_text=transcript, x_vector_only_mode=transcript is None
    )
    codes = None if transcript is None else item.ref_code.numpy().astype(np.int64)
    return ClonedVoice(
        speaker_embedding=item.ref_spk_embedding.float().numpy(),
        ref_codes=codes,
        ref_text=transcript,
        model=checkpoint.name,
    )
