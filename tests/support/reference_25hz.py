"""The reference's 25 Hz speech tokenizer (qwen-tts 0.1.1 `tokenizer_25hz`) for parity tests.

Its modules import sox, onnxruntime, einops, librosa and torchaudio's Kaldi features at
import time. All but torchaudio are installed by `make venv` and run for real; torchaudio's
Kaldi features come from support/kaldi_stand_in.py.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from support import reference
from support.kaldi_stand_in import install_kaldi_stand_in
from support.reference_model import reference_modeling


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
