"""Fixtures for the 25 Hz decoder: a tiny speech tokenizer folder written from the
reference's own decoder with random weights (tests/support/decoder25.py), so our loader
reads exactly what the reference would. The random 25 Hz checkpoint writer can replace
`speech_tokenizer_dir` once it lands."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import save_file

from support.decoder25 import TINY_SPEECH_TOKENIZER, reference_decoder


@pytest.fixture(scope="session")
def reference():
    return reference_decoder()


@pytest.fixture(scope="session")
def speech_tokenizer_dir(tmp_path_factory, reference):
    """A speech_tokenizer folder: config.json and the decoder's tensors as `decoder.*`."""
    folder = tmp_path_factory.mktemp("speech_tokenizer_25hz")
    (folder / "config.json").write_text(json.dumps(TINY_SPEECH_TOKENIZER))
    tensors = {f"decoder.{k}": v.contiguous() for k, v in reference.state_dict().items()}
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="session")
def decoder(speech_tokenizer_dir):
    from ttsfleet_runtime.speech_tokenizer.rate25 import load_speech_tokenizer_25hz

    return load_speech_tokenizer_25hz(speech_tokenizer_dir)
