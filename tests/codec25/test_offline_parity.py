"""Offline decoding equals the reference's (qwen-tts 0.1.1) on the same random weights
and the same initial noise, in float32 on the CPU."""

from __future__ import annotations

import json
import types

import pytest
import torch
from safetensors.torch import load_file, save_file

from support.decoder25 import TINY_SPEECH_TOKENIZER, random_voice, reference_modeling
from ttsfleet_runtime.speech_tokenizer.rate25 import (
    CheckpointMismatch,
    ConfigError,
    load_speech_tokenizer_25hz,
)

REFERENCE_NOISE_FRAMES = 30000  # what the reference's sampler draws per stream


def reference_noise(seed: int, streams: int) -> torch.Tensor:
    """The noise the reference's sampler draws after torch.manual_seed(seed)."""
    torch.manual_seed(seed)
    return torch.randn([streams, REFERENCE_NOISE_FRAMES, 80])


def reference_decode(reference, codes, voices, seed):
    """Qwen3TTSTokenizerV1Model.decode on the reference decoder (the method needs only
    the decoder and the upsample rate of the model it belongs to)."""
    model = types.SimpleNamespace(
        decoder=reference,
        decode_upsample_rate=TINY_SPEECH_TOKENIZER["decode_upsample_rate"],
        config=types.SimpleNamespace(return_dict=False),
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        (audio,) = reference_modeling().Qwen3TTSTokenizerV1Model.decode(
            model,
            codes,
            torch.stack([v.xvector for v in voices]),
            torch.stack([v.ref_mel for v in voices]),
            return_dict=False,
        )
    return audio


def random_codes(seed: int, streams: int, length: int) -> torch.Tensor:
    return torch.randint(0, 50, (streams, length), generator=torch.Generator().manual_seed(seed))


def test_mel_equals_reference(reference, decoder):
    codes = random_codes(1, 2, 40)
    voices = [random_voice(1), random_voice(2)]
    torch.manual_seed(7)
    with torch.no_grad():
        expected = reference.dit.sample(
            torch.stack([v.xvector for v in voices]),
            torch.stack([v.ref_mel for v in voices]),
            codes,
        ).transpose(1, 2)
    mel, frames = decoder.generate_mel(
        codes, [decoder.condition(v) for v in voices], reference_noise(7, 2)
    )
    assert frames.tolist() == [80, 80]
    torch.testing.assert_close(mel, expected, rtol=0, atol=2e-5)


def test_a_fused_dit_layer_equals_the_torch_layer(decoder):
    # What a CUDA device runs in each layer: the norms, gated residuals and rotary
    # positions as kernels.dit_ops (here in Triton's interpreter: one layer, since the
    # whole sampler is minutes there).
    dit = decoder.dit
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 50, dit.config.hidden_size, generator=g)  # 3 blocks
    time = dit.time_embed(torch.tensor([0.3, 0.7]))
    valid = torch.ones(2, 50, dtype=torch.bool)
    valid[1, 40:] = False
    rotary = dit.rotary_embed(50, x.device)
    kinds = {(layer.looks_back, layer.looks_ahead): layer for layer in dit.transformer_blocks}
    assert len(kinds) == 3  # look-back, look-ahead, neither
    for layer in kinds.values():
        mask = dit.attention_masks(valid)[(layer.looks_back, layer.looks_ahead)]
        with torch.no_grad():
            want = layer(x, time, rotary, mask)
            got = layer(x, time, rotary, mask, fused=True)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_the_fused_sampler_sends_every_layer_through_the_kernels(
    speech_tokenizer_dir, decoder, monkeypatch
):
    # The kernels themselves are checked above and in tests/kernels; here they are stood
    # in for by their torch definitions, counted, and the mel must not change.
    from ttsfleet_runtime.kernels import dit_ops
    from ttsfleet_runtime.speech_tokenizer.rate25 import load_speech_tokenizer_25hz, mel_generator

    calls = []

    def norm(x, scale, shift):
        calls.append("norm")
        return mel_generator._modulated_norm(x, scale, shift)

    def residual(x, gate, y):
        calls.append("residual")
        return x + gate * y

    def residual_norm(x, gate, y, scale, shift):
        calls.append("residual_norm")
        summed = x + gate * y
        return summed, mel_generator._modulated_norm(summed, scale, shift)

    def rotate(q, k, cos, sin, head_dim):
        calls.append("rotate")
        batch, frames, _ = q.shape

        def one(t):
            split = t.view(batch, frames, -1, head_dim).transpose(1, 2)
            return mel_generator._rotate(split, cos, sin).transpose(1, 2).reshape(t.shape)

        return one(q), one(k)

    for name, stand_in in (
        ("modulated_norm", norm),
        ("gated_residual", residual),
        ("gated_residual_norm", residual_norm),
        ("rotate_pairs", rotate),
    ):
        monkeypatch.setattr(dit_ops, name, stand_in)
    fused = load_speech_tokenizer_25hz(speech_tokenizer_dir, fused_kernels=True)
    assert fused.dit.fused_kernels and not decoder.dit.fused_kernels
    codes = random_codes(3, 2, 20)
    conditions = [decoder.condition(random_voice(i)) for i in (3, 4)]
    noise = reference_noise(9, 2)
    want, _ = decoder.generate_mel(codes, conditions, noise)
    got, _ = fused.generate_mel(codes, conditions, noise)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    steps, layers = mel_generator.FLOW_STEPS - 1, len(decoder.dit.transformer_blocks)
    for name in ("norm", "residual", "residual_norm", "rotate"):
        assert calls.count(name) == steps * layers, name


def test_vocoder_equals_reference(reference, decoder):
    mel = torch.randn(2, 70, 80, generator=torch.Generator().manual_seed(3)) - 3
    with torch.no_grad():
        expected = reference.bigvgan(mel.transpose(1, 2))
    ours = decoder.vocode(mel, torch.tensor([70, 70]))
    torch.testing.assert_close(torch.stack(ours), expected, rtol=0, atol=1e-6)


def test_the_fused_vocoder_sends_every_activation_through_the_kernel(
    reference, speech_tokenizer_dir, monkeypatch
):
    # What a CUDA device runs: each anti-aliased activation as kernels.anti_aliased_snake,
    # with its own filter and factors. The kernel itself is checked against the torch
    # activation in tests/kernels (a whole vocoder is too slow in Triton's interpreter):
    # here it is stood in for by the torch activation of the module it was called for.
    from ttsfleet_runtime.kernels import anti_aliased_snake as kernel
    from ttsfleet_runtime.speech_tokenizer.rate25 import load_speech_tokenizer_25hz
    from ttsfleet_runtime.speech_tokenizer.rate25.vocoder import AntiAliasedSnake

    fused = load_speech_tokenizer_25hz(speech_tokenizer_dir, fused_kernels=True)
    activations = [m for m in fused.bigvgan.modules() if isinstance(m, AntiAliasedSnake)]
    assert activations and all(m.fused for m in activations)
    by_factors = {id(m.act.frequency): m for m in activations}
    called = []

    def torch_activation(x, lowpass, frequency, inverse_magnitude):
        module = by_factors[id(frequency)]
        assert lowpass is module.lowpass and inverse_magnitude is module.act.inverse_magnitude
        called.append(module)
        module.fused = False
        try:
            return module(x)
        finally:
            module.fused = True

    monkeypatch.setattr(kernel, "anti_aliased_snake", torch_activation)
    mel = torch.randn(2, 20, 80, generator=torch.Generator().manual_seed(5)) - 3
    with torch.no_grad():
        expected = reference.bigvgan(mel.transpose(1, 2))
    ours = fused.vocode(mel, torch.tensor([20, 20]))
    torch.testing.assert_close(torch.stack(ours), expected, rtol=0, atol=1e-6)
    assert sorted(map(id, called)) == sorted(map(id, activations))  # each once, none left


def test_the_kernels_are_fused_on_a_cuda_device_only(speech_tokenizer_dir):
    from ttsfleet_runtime.speech_tokenizer.rate25 import load_speech_tokenizer_25hz

    on_cpu = load_speech_tokenizer_25hz(speech_tokenizer_dir, device="cpu")
    assert not any(getattr(m, "fused", False) for m in on_cpu.bigvgan.modules())
    assert not on_cpu.dit.fused_kernels


def test_decode_equals_reference_decode(reference, decoder):
    codes = random_codes(2, 2, 30)
    voices = [random_voice(3), random_voice(4)]
    expected = reference_decode(reference, codes, voices, seed=11)
    ours = decoder.decode(codes, voices, reference_noise(11, 2))
    assert [a.shape[0] for a in ours] == [30 * decoder.samples_per_code] * 2
    for a, b in zip(ours, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_padded_stream_decodes_as_it_would_alone(reference, decoder):
    """-1 pads a shorter stream; its audio is the reference's for it alone."""
    long_codes, short_codes = random_codes(5, 1, 36), random_codes(6, 1, 17)
    voices = [random_voice(5), random_voice(6)]
    alone = [
        reference_decode(reference, long_codes, voices[:1], seed=21)[0],
        reference_decode(reference, short_codes, voices[1:], seed=22)[0],
    ]
    padded = torch.full((2, 36), -1)
    padded[0], padded[1, :17] = long_codes[0], short_codes[0]
    noise = torch.cat([reference_noise(21, 1), reference_noise(22, 1)])
    ours = decoder.decode(padded, voices, noise)
    assert [a.shape[0] for a in ours] == [36 * 480, 17 * 480]
    for a, b in zip(ours, alone, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_voice_without_reference_is_the_unguided_speaker(reference, decoder):
    """No voice: the DiT sees zeros, as the reference given a zero x-vector and mel."""
    codes = random_codes(8, 1, 24)
    silent = random_voice(0)
    silent = type(silent)(xvector=torch.zeros(192), ref_mel=torch.zeros(40, 80))
    expected = reference_decode(reference, codes, [silent], seed=5)
    (ours,) = decoder.decode(codes, [None], reference_noise(5, 1))
    torch.testing.assert_close(ours, expected[0], rtol=0, atol=1e-5)


def _copy_folder(src, dst, tensors=None, config=None):
    dst.mkdir()
    (dst / "config.json").write_text(
        json.dumps(config or json.loads((src / "config.json").read_text()))
    )
    save_file(tensors or load_file(str(src / "model.safetensors")), str(dst / "model.safetensors"))
    return dst


def test_missing_and_unexpected_tensors_are_named(speech_tokenizer_dir, tmp_path):
    tensors = load_file(str(speech_tokenizer_dir / "model.safetensors"))
    del tensors["decoder.bigvgan.conv_post.weight"]
    tensors["decoder.dit.extra.weight"] = torch.zeros(1)
    tensors["encoder.anything"] = torch.zeros(1)  # the encoder half is not the decoder's
    folder = _copy_folder(speech_tokenizer_dir, tmp_path / "st", tensors=tensors)
    with pytest.raises(CheckpointMismatch) as err:
        load_speech_tokenizer_25hz(folder)
    assert "missing decoder.bigvgan.conv_post.weight" in str(err.value)
    assert "unexpected decoder.dit.extra.weight" in str(err.value)
    assert "encoder.anything" not in str(err.value)


def test_wrong_model_type_is_refused(speech_tokenizer_dir, tmp_path):
    config = json.loads((speech_tokenizer_dir / "config.json").read_text())
    config["model_type"] = "qwen3_tts_tokenizer_12hz"
    folder = _copy_folder(speech_tokenizer_dir, tmp_path / "st", config=config)
    with pytest.raises(ConfigError, match="qwen3_tts_tokenizer_12hz"):
        load_speech_tokenizer_25hz(folder)
