"""The random checkpoint writer's 25 Hz checkpoints load in the reference exactly, and
the 12 Hz default writes what it always wrote."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from support.reference_25hz import (
    build_reference_speech_tokenizer_25hz,
    reference_25hz_modules,
    reference_speech_tokenizer_25hz,
)
from support.reference_model import reference_model
from ttsfleet_runtime.checkpoint.campplus_onnx import FBANK_BINS
from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint
from ttsfleet_runtime.checkpoint.sizes import CODEBOOK_SIZE, model_config
from ttsfleet_runtime.checkpoint.speech_tokenizer_25hz_files import (
    speech_tokenizer_25hz_config,
    speech_tokenizer_25hz_shapes,
)
from ttsfleet_runtime.model.config import TTSConfig

# sha256 of every file of `write_random_checkpoint(dir, "tiny", "Base", seed=0)` as the
# writer wrote them before it knew the 25 Hz tokenizer. The weight files also pin torch's
# random generator: after a torch upgrade, check them against the previous release's
# writer before updating a digest here.
_TINY_BASE_12HZ_DIGESTS = {
    "config.json": "64ec4bee985ba6bd992db813e721a698e51cf770517844697675874892a28ed9",
    "generation_config.json": "316cf4073236228d22d38dede421bb048149f3c93cb3bc01f8dab985ae878468",
    "merges.txt": "bad3202eefe135010d3b62805fbc0d429e51cc37c3fed35691efc2bf267cd231",
    "model.safetensors": "6414bbe811bc24518bd2d15acc4174b124498df37ceb0243216789e9ca452c73",
    "speech_tokenizer/config.json": "fae47f6a8fc013323efe0457679abbdd942b8bfdef76fa10877aee91f70fe95a",
    "speech_tokenizer/model.safetensors": "189884c8a3f8819d89add66d9179f4e34f4172410d2188f714021fd3a57be84d",
    "speech_tokenizer/preprocessor_config.json": "2d0fcb510a2fc626ed920e12cd8e87be09fa7677cbb61e7a0f2340e541468afa",
    "tokenizer_config.json": "c4c500c5b61bb8a5b57950802cbfe801a57db9adb31181318aba266f099224b7",
    "vocab.json": "31c5a9e29a9c74264f5672011c29cdf891e39622167cbcf6c7207b2ade10106c",
}
# sha256 over the config.json of every size and variant at 12 Hz, as published.
_12HZ_CONFIGS_DIGEST = "b95a781708a46799aa12c425a9c1e05e27d55373e56d31ddae2822a03aee5871"


def test_12hz_stays_the_default_and_writes_the_same_bytes(tiny_base):
    written = {
        str(f.relative_to(tiny_base)): hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(tiny_base.rglob("*"))
        if f.is_file()
    }
    assert written == _TINY_BASE_12HZ_DIGESTS
    configs = hashlib.sha256()
    for size in ("tiny", "0.6B", "1.7B"):
        for variant in ("Base", "CustomVoice", "VoiceDesign"):
            configs.update(json.dumps(model_config(size, variant), indent=2).encode())
    assert configs.hexdigest() == _12HZ_CONFIGS_DIGEST


@pytest.mark.parametrize("size", ["tiny", "0.6B", "1.7B"])
def test_25hz_talker_has_one_code_group_and_the_codebook_plus_special_ids(size):
    config = model_config(size, "CustomVoice", tokenizer_rate_hz=25)
    talker = config["talker_config"]
    assert config["tokenizer_type"] == "qwen3_tts_tokenizer_25hz"
    assert talker["num_code_groups"] == 1 == talker["code_predictor_config"]["num_code_groups"]
    codebook = CODEBOOK_SIZE[25]
    specials = [
        v
        for k, v in talker.items()
        if k.startswith("codec_") and k.endswith("_id") and isinstance(v, int)
    ]
    # The reference suppresses the top 1,024 ids (all but EOS) while sampling codes.
    assert all(codebook <= i < talker["vocab_size"] == codebook + 1024 for i in specials)
    assert len(set(specials)) == len(specials) == 7
    # Language and speaker ids too: none of them may be a code of the larger codebook.
    named = [*talker["codec_language_id"].values(), *talker["spk_id"].values()]
    assert named and all(codebook <= i < talker["vocab_size"] for i in named)
    assert not set(named) & set(specials)
    parsed = TTSConfig.from_dict(config)
    assert parsed.tokenizer_type == "qwen3_tts_tokenizer_25hz" and parsed.num_code_groups == 1
    assert parsed.tokenizer_rate_hz == 25
    assert TTSConfig.from_dict(model_config(size, "CustomVoice")).tokenizer_rate_hz == 12
    with pytest.raises(ValueError, match="unknown tokenizer_type 'qwen3_tts_tokenizer_50hz'"):
        TTSConfig.from_dict(dict(config, tokenizer_type="qwen3_tts_tokenizer_50hz"))
    with pytest.raises(ValueError, match="tokenizer rate"):
        model_config(size, "CustomVoice", tokenizer_rate_hz=50)


@pytest.mark.parametrize("fixture", ["tiny_25hz_base", "tiny_25hz_custom_voice"])
def test_25hz_talker_loads_in_the_reference_with_nothing_missing_or_unexpected(fixture, request):
    checkpoint = request.getfixturevalue(fixture)
    model = reference_model(checkpoint)  # a strict load of every tensor written
    assert model.config.talker_config.num_code_groups == 1
    assert len(model.talker.code_predictor.lm_head) == 0  # no sub-codes to predict


def test_25hz_speech_tokenizer_loads_in_the_reference_with_every_tensor(tiny_25hz_base):
    folder = tiny_25hz_base / "speech_tokenizer"
    for name in ("config.json", "preprocessor_config.json", "model.safetensors", "campplus.onnx"):
        assert (folder / name).is_file(), name
    raw = json.loads((folder / "config.json").read_text())
    assert raw["model_type"] == "qwen3_tts_tokenizer_25hz"
    reference_speech_tokenizer_25hz(folder)  # strict: nothing missing or unexpected


@pytest.mark.parametrize("size", ["tiny", "real"])
def test_the_shape_table_is_the_reference_state_dict(size):
    config = speech_tokenizer_25hz_config(size)
    with torch.device("meta"):
        model = build_reference_speech_tokenizer_25hz(config)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert speech_tokenizer_25hz_shapes(config) == expected


@pytest.mark.parametrize("size", ["tiny", "real"])
def test_rates_are_25_codes_a_second_from_16_khz_to_24_khz(size):
    config = speech_tokenizer_25hz_config(size)
    assert config["input_sample_rate"] / config["encode_downsample_rate"] == 25
    assert config["output_sample_rate"] / config["decode_upsample_rate"] == 25


def test_the_official_loader_encodes_and_decodes_the_written_folder(tiny_25hz_base):
    """Qwen3TTSTokenizer.from_pretrained (campplus.onnx included) on the folder: 2 s of
    16 kHz audio -> 50 varied codes, a unit x-vector, a 100 Hz reference mel; 50 codes ->
    2 s of 24 kHz audio that the random weights did not flatten or clip away."""
    *_, tokenizer_class = reference_25hz_modules()
    tokenizer = tokenizer_class.from_pretrained(str(tiny_25hz_base / "speech_tokenizer"))
    rng = np.random.default_rng(0)
    audio = ((rng.random(32000) - 0.5) * 0.4).astype(np.float32)
    encoded = tokenizer.encode(audio, sr=16000)
    codes = encoded.audio_codes[0]
    assert codes.shape == (50,) and len(set(codes.tolist())) > 10
    assert encoded.xvectors[0].shape == (192,)
    assert encoded.xvectors[0].norm().item() == pytest.approx(1.0, abs=1e-5)
    assert encoded.ref_mels[0].shape == (200, 80)
    torch.manual_seed(0)
    (wave,), _ = tokenizer.decode(encoded)
    assert wave.shape == (48000,)
    assert float(np.std(wave)) > 0.01 and float(np.mean(np.abs(wave) >= 0.999)) < 0.5


def test_campplus_maps_fbank_frames_to_one_xvector(tiny_25hz_base):
    import onnxruntime

    session = onnxruntime.InferenceSession(
        str(tiny_25hz_base / "speech_tokenizer" / "campplus.onnx"),
        providers=["CPUExecutionProvider"],
    )
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((1, 120, FBANK_BINS)).astype(np.float32)
    (out,) = session.run(None, {session.get_inputs()[0].name: feats})
    (shorter,) = session.run(None, {session.get_inputs()[0].name: feats[:, :37]})
    assert out.shape == shorter.shape == (1, 192)
    assert not np.allclose(out, shorter) and float(out.std()) > 0.1


def test_random_25hz_weights_never_put_eos_among_the_codes_sampling_keeps(tiny_25hz_custom_voice):
    from safetensors.torch import load_file

    config = json.loads((tiny_25hz_custom_voice / "config.json").read_text())["talker_config"]
    generation = json.loads((tiny_25hz_custom_voice / "generation_config.json").read_text())
    head = load_file(str(tiny_25hz_custom_voice / "model.safetensors"))["talker.codec_head.weight"]
    hidden = torch.randn(4000, head.shape[1], generator=torch.Generator().manual_seed(0))
    logits = hidden @ head.float().T
    kept = logits[:, : CODEBOOK_SIZE[25]].topk(generation["top_k"]).values[:, -1]
    assert bool((logits[:, config["codec_eos_token_id"]] < kept).all())


def test_cli_writes_a_25hz_checkpoint(tmp_path):
    out = tmp_path / "ckpt"
    subprocess.run(
        [
            *(sys.executable, "-m", "ttsfleet_runtime.cli", "checkpoint", "--random"),
            *("--size", "tiny", "--variant", "VoiceDesign", "--tokenizer-rate", "25"),
            *("--out", str(out)),
        ],
        check=True,
        capture_output=True,
    )
    assert json.loads((out / "config.json").read_text())["tokenizer_type"].endswith("25hz")
    tokenizer = json.loads((out / "speech_tokenizer" / "config.json").read_text())
    assert tokenizer["model_type"] == "qwen3_tts_tokenizer_25hz"


def test_same_seed_writes_the_same_25hz_weights(tmp_path):
    from safetensors.torch import load_file

    folders = [
        write_random_checkpoint(tmp_path / n, "tiny", "Base", seed=3, tokenizer_rate_hz=25)
        for n in ("a", "b")
    ]
    a, b = (load_file(str(f / "speech_tokenizer" / "model.safetensors")) for f in folders)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
