"""The 25 Hz decoder's test material: the tiny speech tokenizer config (`TINY_SPEECH_TOKENIZER`,
the one place its size is decided), the reference decoder built from it with random weights,
and random voices. The fixtures in tests/codec25/conftest.py write it as a folder."""

from __future__ import annotations

import math

import torch

from support.reference_25hz import reference_25hz_modules

TINY_DIT = {
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "head_dim": 16,
    "ff_mult": 2,
    "emb_dim": 16,
    "block_size": 24,
    "look_ahead_layers": [2],
    "look_backward_layers": [0, 3],
    "repeats": 2,
    "num_embeds": 50,
    "mel_dim": 80,
    "enc_emb_dim": 192,
    "enc_dim": 8,
    "enc_channels": [16, 16, 16, 16, 48],
    "enc_kernel_sizes": [5, 3, 3, 3, 1],
    "enc_dilations": [1, 2, 3, 4, 1],
    "enc_attention_channels": 8,
    "enc_res2net_scale": 2,
    "enc_se_channels": 8,
}
TINY_BIGVGAN = {
    "mel_dim": 80,
    "upsample_initial_channel": 64,
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
    "upsample_rates": [5, 3, 2, 2, 2, 2],
    "upsample_kernel_sizes": [11, 7, 4, 4, 4, 4],
}
TINY_SPEECH_TOKENIZER = {
    "model_type": "qwen3_tts_tokenizer_25hz",
    "decoder_config": {"dit_config": TINY_DIT, "bigvgan_config": TINY_BIGVGAN},
    "input_sample_rate": 24000,
    "output_sample_rate": 24000,
    "decode_upsample_rate": TINY_DIT["repeats"] * math.prod(TINY_BIGVGAN["upsample_rates"]),
    "encode_downsample_rate": 1920,
}


def reference_modeling():
    """The reference's modeling module (qwen-tts 0.1.1): a failed import fails the test."""
    return reference_25hz_modules()[1]


def reference_decoder(seed: int = 0):
    """The reference decoder of the tiny config, random weights (SnakeBeta and modulation
    parameters perturbed and attention amplified, since their initial values hide
    mistakes and make the DiT's context count for little)."""
    configuration = reference_25hz_modules()[0]
    torch.manual_seed(seed)
    config = configuration.Qwen3TTSTokenizerV1DecoderConfig(
        **TINY_SPEECH_TOKENIZER["decoder_config"]
    )
    decoder = reference_modeling().Qwen3TTSTokenizerV1Decoder(config).eval()
    with torch.no_grad():
        for name, tensor in decoder.named_parameters():
            if name.endswith((".alpha", ".beta")):
                tensor.uniform_(-0.5, 0.5)
            elif "attn_norm.linear" in name or "norm_out.linear" in name:
                tensor.normal_(0, 0.1)
            elif ".attn.to_v." in name or ".attn.to_out." in name:
                tensor.mul_(4)  # attention that matters: windowed streaming shows its error
    return decoder


def random_voice(seed: int, frames: int = 40):
    from ttsfleet_runtime.speech_tokenizer.rate25 import DecoderVoice

    g = torch.Generator().manual_seed(seed)
    xvector = torch.randn(192, generator=g)
    return DecoderVoice(
        xvector=xvector / xvector.norm(), ref_mel=torch.randn(frames, 80, generator=g) - 4
    )
