"""Writes a 25 Hz `speech_tokenizer/` folder (the reference's "v1" layout) with random weights.

The folder qwen-tts 0.1.1 loads with `Qwen3TTSTokenizer.from_pretrained`: config.json
(`model_type` qwen3_tts_tokenizer_25hz), preprocessor_config.json, model.safetensors with
every `encoder.*` tensor (a Whisper-style encoder with a one-codebook VQ after layer
`audio_vq_layers`) and every `decoder.*` tensor (a block-wise DiT with its ECAPA-TDNN,
then BigVGAN), and campplus.onnx, the x-vector model the encoder side runs.

The encoder hears 16 kHz audio (Whisper's log-mel, and the x-vector's fbank, are 16 kHz
features) and emits 25 codes a second (640 samples); the decoder writes 24 kHz, 960
samples a code: `repeats` 2 mel frames a code and BigVGAN upsampling 480 a mel frame (the
reference's default stages upsample 240; the real dims add one x2 stage).

No 25 Hz checkpoint is published, so "real" dims are the reference's config defaults
where they are consistent with that rate; "tiny" is small enough for CPU parity tests.
Tensor names and shapes come from the config (`speech_tokenizer_25hz_shapes`): the
encoder's are listed here, the decoder's are our decoder's own state dict (its loader
takes the official names strictly); a test compares them with the reference model's.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import torch

from ..speech_tokenizer.rate25.config import SpeechTokenizer25HzConfig
from ..speech_tokenizer.rate25.decoder import TENSOR_PREFIX as DECODER_PREFIX
from ..speech_tokenizer.rate25.decoder import Decoder25Hz
from ..speech_tokenizer.rate25.encoder import ENCODER_PREFIX
from .campplus_onnx import write_random_campplus
from .sizes import CODEBOOK_SIZE
from .speech_tokenizer_files import PREPROCESSOR_CONFIG as PREPROCESSOR_CONFIG_12HZ

BIGVGAN_PREFIX = DECODER_PREFIX + "bigvgan."

INPUT_SAMPLE_RATE = 16000
OUTPUT_SAMPLE_RATE = 24000
CODES_PER_SECOND = 25

# The 12 Hz folder's feature extractor, at the encoder's 16 kHz.
PREPROCESSOR_CONFIG = dict(PREPROCESSOR_CONFIG_12HZ, sampling_rate=INPUT_SAMPLE_RATE)

_REAL = dict(
    encoder_config=dict(
        n_mels=128,
        n_ctx=1500,
        n_state=1280,
        n_head=20,
        n_layer=32,
        n_window=100,
        output_dim=3584,
        audio_vq_type="GRVQ",
        audio_vq_layers=6,
        audio_vq_codebook_size=CODEBOOK_SIZE[25],
        audio_vq_codebook_dim=1280,
        audio_vq_pe=True,
        audio_vq_ds_rate=2,
    ),
    decoder_config=dict(
        dit_config=dict(
            hidden_size=1024,
            num_hidden_layers=22,
            num_attention_heads=16,
            ff_mult=2,
            emb_dim=512,
            head_dim=64,
            rope_theta=10000.0,
            max_position_embeddings=32768,
            block_size=24,
            look_ahead_layers=[10],
            look_backward_layers=[0, 20],
            repeats=2,
            num_embeds=CODEBOOK_SIZE[25],
            mel_dim=80,
            dropout=0.1,
            enc_emb_dim=192,
            enc_dim=128,
            enc_channels=[256, 256, 256, 256, 768],
            enc_kernel_sizes=[5, 3, 3, 3, 1],
            enc_dilations=[1, 2, 3, 4, 1],
            enc_attention_channels=64,
            enc_res2net_scale=2,
            enc_se_channels=64,
        ),
        bigvgan_config=dict(
            mel_dim=80,
            upsample_initial_channel=1536,
            resblock_kernel_sizes=[3, 7, 11],
            resblock_dilation_sizes=[[1, 3, 5], [1, 3, 5], [1, 3, 5]],
            upsample_rates=[5, 3, 2, 2, 2, 2, 2],
            upsample_kernel_sizes=[11, 7, 4, 4, 4, 4, 4],
        ),
    ),
)
# Narrow and shallow, with every kind of layer the real one has (look-back and
# look-ahead DiT layers, both AMP block kinds); the codebook and mel sizes stay real.
_TINY = dict(
    encoder_config=dict(n_state=64, n_head=4, n_layer=3, output_dim=96, audio_vq_layers=2),
    decoder_config=dict(
        dit_config=dict(
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            emb_dim=32,
            head_dim=16,
            look_ahead_layers=[2],
            look_backward_layers=[0, 3],
            enc_dim=16,
            enc_channels=[32, 32, 32, 32, 96],
            enc_attention_channels=16,
            enc_se_channels=16,
        ),
        bigvgan_config=dict(
            upsample_initial_channel=64,
            upsample_rates=[5, 4, 4, 6],
            upsample_kernel_sizes=[11, 8, 8, 12],
        ),
    ),
)
_TINY["encoder_config"]["audio_vq_codebook_dim"] = _TINY["encoder_config"]["n_state"]


def speech_tokenizer_25hz_config(size: str) -> dict[str, Any]:
    """speech_tokenizer/config.json of a 25 Hz checkpoint: "tiny" or "real"."""
    if size not in ("tiny", "real"):
        raise ValueError(f"unknown speech tokenizer size {size!r}; choose tiny or real")
    encoder = copy.deepcopy(_REAL["encoder_config"])
    decoder = copy.deepcopy(_REAL["decoder_config"])
    if size == "tiny":
        encoder.update(_TINY["encoder_config"])
        decoder["dit_config"].update(_TINY["decoder_config"]["dit_config"])
        decoder["bigvgan_config"].update(_TINY["decoder_config"]["bigvgan_config"])
    mel_upsampling = math.prod(decoder["bigvgan_config"]["upsample_rates"])
    return dict(
        architectures=["Qwen3TTSTokenizerV1Model"],
        model_type="qwen3_tts_tokenizer_25hz",
        encoder_config=encoder,
        decoder_config=decoder,
        input_sample_rate=INPUT_SAMPLE_RATE,
        output_sample_rate=OUTPUT_SAMPLE_RATE,
        encode_downsample_rate=INPUT_SAMPLE_RATE // CODES_PER_SECOND,
        decode_upsample_rate=decoder["dit_config"]["repeats"] * mel_upsampling,
    )


def _encoder_shapes(c: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    n, out, ds = c["n_state"], c["output_dim"], c["audio_vq_ds_rate"]
    codebook, code_dim = c["audio_vq_codebook_size"], c["audio_vq_codebook_dim"]
    shapes: dict[str, tuple[int, ...]] = {
        "positional_embedding": (c["n_ctx"], n),
        "conv1.weight": (n, c["n_mels"], 3),
        "conv1.bias": (n,),
        "conv2.weight": (n, n, 3),
        "conv2.bias": (n,),
    }
    for i in range(c["n_layer"]):
        p = f"blocks.{i}."
        for ln in ("attn_ln", "mlp_ln"):
            shapes[p + f"{ln}.weight"] = shapes[p + f"{ln}.bias"] = (n,)
        for proj in ("query", "key", "value", "out"):
            shapes[p + f"attn.{proj}.weight"] = (n, n)
            if proj != "key":
                shapes[p + f"attn.{proj}.bias"] = (n,)
        shapes[p + "mlp.0.weight"], shapes[p + "mlp.0.bias"] = (4 * n, n), (4 * n,)
        shapes[p + "mlp.2.weight"], shapes[p + "mlp.2.bias"] = (n, 4 * n), (n,)
    shapes.update(
        {
            "ln_post.weight": (n,),
            "ln_post.bias": (n,),
            "proj.weight": (out, n),
            "proj.bias": (out,),
            "audio_bos_eos_token.weight": (2, out),
        }
    )
    if ds != 1:
        shapes.update(
            {
                "audio_vq_downsample.weight": (n, n, ds),
                "audio_vq_downsample.bias": (n,),
                "audio_vq_upsample.weight": (n, n, ds),
                "audio_vq_upsample.bias": (n,),
            }
        )
    vq = "audio_quantizer.rvqs.0."
    shapes.update(
        {
            vq + "inited": (1, 1),
            vq + "cluster_size": (1, codebook),
            vq + "embed": (1, codebook, code_dim),
            vq + "embed_avg": (1, codebook, code_dim),
        }
    )
    if code_dim != n:
        shapes.update(
            {
                vq + "layers.0.project_in.weight": (code_dim, n),
                vq + "layers.0.project_in.bias": (code_dim,),
                vq + "layers.0.project_out.weight": (n, code_dim),
                vq + "layers.0.project_out.bias": (n,),
            }
        )
    if c["audio_vq_pe"]:
        shapes["project_after_vq_pe.weight"], shapes["project_after_vq_pe.bias"] = (n, n), (n,)
    return {ENCODER_PREFIX + k: v for k, v in shapes.items()}


def _decoder_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every decoder tensor: our decoder's own (it loads the official
    names strictly), made on the meta device from the config."""
    with torch.device("meta"):
        decoder = Decoder25Hz(SpeechTokenizer25HzConfig.from_dict(config))
    return {DECODER_PREFIX + k: tuple(v.shape) for k, v in decoder.state_dict().items()}


def speech_tokenizer_25hz_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Official name -> shape of every tensor of a 25 Hz speech tokenizer's safetensors."""
    return {**_encoder_shapes(config["encoder_config"]), **_decoder_shapes(config)}


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's fixed positional table (the checkpoint stores it as a buffer)."""
    step = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-step * torch.arange(channels // 2, dtype=torch.float32))
    t = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


def _random_tensor(
    name: str, shape: tuple[int, ...], config: dict[str, Any], gen: torch.Generator
) -> torch.Tensor:
    """Values under which every part changes the output: variance-preserving weights
    (the AdaLN modulations and gates included, which trained-init zeroes would silence),
    small random biases, norms near one, a unit-variance codebook, SnakeBeta on a log
    scale, BigVGAN's residual and output convs damped so the waveform stays mostly inside
    [-1, 1]. Buffers that are functions of the config get their true values."""

    def normal(std: float) -> torch.Tensor:
        return torch.randn(shape, generator=gen) * std

    leaf = name.rsplit(".", 1)[-1]
    if leaf == "positional_embedding":
        return _sinusoids(*shape)
    if leaf == "inv_freq":
        dim = 2 * shape[0]
        base = config["decoder_config"]["dit_config"]["rope_theta"]
        return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    if leaf == "inited":
        return torch.ones(shape)
    if leaf == "cluster_size":
        return torch.rand(shape, generator=gen) * 1.5 + 0.5
    if leaf == "embed":
        return normal(1.0)
    if name.endswith("codec_embed.weight") or name.endswith("audio_bos_eos_token.weight"):
        return normal(1.0)
    if leaf in ("alpha", "beta"):
        return normal(0.3)
    if ("_ln." in name or "ln_post" in name) and leaf == "weight":
        return 1.0 + normal(0.1)
    if leaf == "bias":
        return normal(0.02)
    fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
    if ".ups." in name:  # ConvTranspose1d weights are [in, out, k]: the fan-in is in * k / stride
        fan_in = shape[0] * shape[2] // 2
    if name.startswith(BIGVGAN_PREFIX) and (".convs2." in name or "conv_post" in name):
        return normal(0.3 / math.sqrt(fan_in))
    return normal(1.0 / math.sqrt(fan_in))


def write_random_speech_tokenizer_25hz(
    out_dir: str | Path, size: str = "tiny", seed: int = 0
) -> Path:
    """Write config.json, preprocessor_config.json, model.safetensors and campplus.onnx."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = speech_tokenizer_25hz_config(size)
    gen = torch.Generator().manual_seed(seed)
    shapes = speech_tokenizer_25hz_shapes(config)
    tensors = {
        name: _random_tensor(name, shape, config, gen).float().contiguous()
        for name, shape in sorted(shapes.items())
    }
    # The VQ's running sum starts as a copy of its codebook (inference never reads it).
    for name in [n for n in tensors if n.endswith(".embed_avg")]:
        tensors[name] = tensors[name.replace("embed_avg", "embed")].clone()
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR_CONFIG, indent=2) + "\n")
    xvector_dim = config["decoder_config"]["dit_config"]["enc_emb_dim"]
    write_random_campplus(out / "campplus.onnx", out_dim=xvector_dim, seed=seed)
    return out
