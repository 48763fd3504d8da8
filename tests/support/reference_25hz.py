"""The reference's 25 Hz speech tokenizer (qwen-tts 0.1.1 `tokenizer_25hz`) for parity tests.

Its modules import sox, onnxruntime, einops, librosa and torchaudio's Kaldi features at
import time. All but torchaudio are installed by `make venv` and run for real. torchaudio
has no build for the torch this project runs (its last release, 2.11, refuses to load
next to a newer torch), so `torchaudio.compliance.kaldi` is given a stand-in whose `fbank`
is kaldi-native-fbank, a C++ port of Kaldi's own feature code with the same options and
defaults: the reference's x-vector features are still Kaldi's, computed by code that is
not ours.
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import sys
import types
from pathlib import Path

import numpy as np

from support import reference
from support.reference_model import reference_modeling


def _kaldi_fbank(
    waveform, num_mel_bins: int = 23, dither: float = 0.0, sample_frequency: float = 16000.0
):
    """torchaudio.compliance.kaldi.fbank for the arguments the reference passes (every
    other option at torchaudio's default, which is Kaldi's)."""
    import kaldi_native_fbank as knf
    import torch

    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = sample_frequency
    opts.frame_opts.dither = dither
    opts.mel_opts.num_bins = num_mel_bins
    # torchaudio's mel banks are Kaldi's (HTK mel scale, unnormalised triangles).
    opts.mel_opts.use_slaney_mel_scale = False
    opts.mel_opts.norm = ""
    # torchaudio floors the power spectrum at float32 epsilon before the log.
    opts.use_log_floor = True
    fbank = knf.OnlineFbank(opts)
    fbank.accept_waveform(sample_frequency, waveform.reshape(-1).double().tolist())
    fbank.input_finished()
    frames = [fbank.get_frame(i) for i in range(fbank.num_frames_ready)]
    return torch.from_numpy(np.array(frames, dtype=np.float32))


def install_kaldi_stand_in() -> None:
    """Make `import torchaudio.compliance.kaldi` give the kaldi-native-fbank stand-in."""
    reference.require("kaldi_native_fbank")
    if getattr(sys.modules.get("torchaudio.compliance.kaldi"), "fbank", None) is _kaldi_fbank:
        return
    names = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi")
    for name in names:
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
    sys.modules["torchaudio"].compliance = sys.modules["torchaudio.compliance"]
    sys.modules["torchaudio.compliance"].kaldi = sys.modules["torchaudio.compliance.kaldi"]
    sys.modules["torchaudio.compliance.kaldi"].fbank = _kaldi_fbank


def reference_25hz_modules():
    """(configuration, modeling, speech_vq, Qwen3TTSTokenizer) of the reference."""
    for module in ("sox", "onnxruntime", "einops", "librosa"):
        reference.require(module)
    install_kaldi_stand_in()
    reference_modeling()  # the package's other audio imports, as the 12 Hz tests have them
    base = "qwen_tts.core.tokenizer_25hz"
    return (
        reference.require(f"{base}.configuration_qwen3_tts_tokenizer_v1"),
        reference.require(f"{base}.modeling_qwen3_tts_tokenizer_v1"),
        reference.require(f"{base}.vq.speech_vq"),
        reference.require("qwen_tts.inference.qwen3_tts_tokenizer").Qwen3TTSTokenizer,
    )


def build_reference_speech_tokenizer_25hz(raw: dict):
    """The reference Qwen3TTSTokenizerV1Model for a speech_tokenizer/config.json (as a
    dict), randomly initialised."""
    config_module, modeling, _, _ = reference_25hz_modules()
    cfg = config_module.Qwen3TTSTokenizerV1Config(
        **{k: v for k, v in raw.items() if k not in ("architectures", "model_type")}
    )
    return modeling.Qwen3TTSTokenizerV1Model(cfg)


@functools.lru_cache(maxsize=4)
def reference_speech_tokenizer_25hz(folder: Path):
    """The reference 25 Hz tokenizer holding a speech_tokenizer/ folder's weights (strict
    load), float32, with its x-vector extractor on the folder's campplus.onnx."""
    from safetensors.torch import load_file

    model = build_reference_speech_tokenizer_25hz(json.loads((folder / "config.json").read_text()))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    model.load_encoder_xvector_extractor(str(folder / "campplus.onnx"))
    return model.float().eval()
