"""Loads an official-layout Qwen3-TTS checkpoint (local folder or hub id) into
the engine's modules, fusing QKV and gate-up projections on the way."""

from __future__ import annotations

import dataclasses
import json
import logging
import mmap
from collections.abc import Callable
from pathlib import Path

import torch

from . import fp8
from .code_predictor import CodePredictor
from .config import TalkerConfig, TTSConfig
from .layers import DecoderStack, RotaryTable
from .ops import EAGER, TalkerOps
from .talker import Talker
from .tensor_layout import tensor_shapes

log = logging.getLogger(__name__)

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


@dataclasses.dataclass
class LoadedModel:
    path: Path
    config: TTSConfig
    talker: Talker
    # None when frames are one code (25 Hz: `num_code_groups` 1): nothing to predict.
    # The checkpoint still holds the predictor's stack; it is checked, not loaded.
    predictor: CodePredictor | None
    weights: str = "bf16"  # the decoder layers' matrices: bf16 (the dtype) or fp8

    def weight_bytes(self) -> dict[str, int]:
        """Bytes of the weights in memory: the decoder layers' matrices (what
        `weights` fp8 quantizes: half of bf16, plus a float32 scale a row), the rest
        (embeddings, heads, norms, projections), and their total."""
        modules = [m for m in (self.talker, self.predictor) if m is not None]
        # Tensors and Fp8Weights both have `nbytes`; only the former are parameters.
        found = [
            getattr(layer, name)
            for m in modules
            for layer in m.stack.layers
            for name in fp8.QUANTIZED_MATRICES
        ]
        matrices = sum(w.nbytes for w in found)
        parameters = sum(p.nbytes for m in modules for p in m.parameters())
        other = parameters - sum(w.nbytes for w in found if isinstance(w, torch.Tensor))
        return dict(decoder_matrices=matrices, other=other, total=matrices + other)


def resolve_checkpoint(model: str, revision: str | None = None) -> Path:
    """A local folder as is; anything else is a hub id fetched into the HF cache."""
    path = Path(model)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download  # only needed for hub ids

    return Path(snapshot_download(model, revision=revision))


def checkpoint_files(path: Path) -> list[str]:
    """model.safetensors, or the shards its index names."""
    index = path / "model.safetensors.index.json"
    if index.exists():
        return sorted(set(json.loads(index.read_text())["weight_map"].values()))
    return ["model.safetensors"]


def read_tensors(path: Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The talker's tensors of the checkpoint in folder `path`, on `device`."""
    tensors: dict[str, torch.Tensor] = {}
    for name in checkpoint_files(path):
        tensors.update(read_safetensors(path / name, device, lambda key: key.startswith("talker.")))
    return tensors


# safetensors' dtype names (the format's header), as torch's dtypes.
SAFETENSORS_DTYPES = {
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(
    file: Path, device: str, wanted: Callable[[str], bool]
) -> dict[str, torch.Tensor]:
    """The tensors of one safetensors file whose names `wanted` accepts, on `device`,
    from one copy of the bytes from the first of them to the last: a copy per tensor
    (safetensors' `get_tensor`) is hundreds of host-to-device copies at start-up.

    The format is an 8-byte little-endian header length, a JSON header giving each
    tensor's dtype, shape and [start, end) byte offsets in the data that follows.
    Each tensor is a view of the copy; one whose offset is not a multiple of its
    element size (the format does not promise alignment) is copied out first."""
    with open(file, "rb") as f:
        header_bytes = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_bytes))
    header.pop("__metadata__", None)
    entries = {key: entry for key, entry in header.items() if wanted(key)}
    if not entries:
        return {}
    first = min(entry["data_offsets"][0] for entry in entries.values())
    last = max(entry["data_offsets"][1] for entry in entries.values())
    # ACCESS_COPY: a writable view of the file (torch warns on read-only buffers), never
    # written. The copy to `device` is the tensors' own memory: the mapping then closes.
    with open(file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) as mapped:
        in_file = torch.frombuffer(
            mapped, dtype=torch.uint8, offset=8 + header_bytes + first, count=last - first
        )
        data = in_file.to(device, copy=True)
        del in_file  # releases the mapping's buffer, so that it can close
    tensors = {}
    for key, entry in entries.items():
        begin, end = (offset - first for offset in entry["data_offsets"])
        dtype = SAFETENSORS_DTYPES.get(entry["dtype"])
        if dtype is None:
            raise ValueError(f"{file}: {key} is {entry['dtype']}, a dtype not read here")
        raw = data[begin:end]
        if begin % dtype.itemsize:
            raw = raw.clone()
        tensors[key] = raw.view(dtype).reshape(entry["shape"])
    return tensors


def load_model(
    model: str | Path,
    device: str = "cpu",
    dtype: str = "bfloat16",
    max_positions: int = 4096,
    progress: Callable[[str], None] | None = None,
    ops: TalkerOps = EAGER,
    weights: str = "bf16",
) -> LoadedModel:
    """The checkpoint's talker and code predictor on `device`, calling `ops` (eager
    torch, or the fused kernels: model/ops.py). `weights` "fp8": the decoder layers'
    matrices quantized at load (model/fp8.py)."""
    say = progress or log.info
    if weights not in fp8.WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(fp8.WEIGHTS)}, not {weights!r}")
    if weights == "fp8":
        fp8.check_device(device, DTYPES[dtype])  # before any weight is read
    path = resolve_checkpoint(str(model))
    config = TTSConfig.from_file(path / "config.json")
    say(f"loading {path} ({config.tts_model_type}, {config.tts_model_size}) to {device} as {dtype}")
    # Straight to the device: the QKV and gate-up concatenations below then run there
    # (about 1 s of host copies at 1.7B otherwise). What they leave cached on the GPU
    # is freed before the KV pool is sized (ModelRunner._kv_pool_blocks).
    tensors = read_tensors(path, device)
    expected = tensor_shapes(config)
    missing = [k for k in expected if k not in tensors]
    if missing:
        raise ValueError(f"checkpoint {path} lacks {len(missing)} tensors, e.g. {missing[:3]}")
    for k, shape in expected.items():
        if tuple(tensors[k].shape) != shape:
            raise ValueError(
                f"{k}: shape {tuple(tensors[k].shape)} in checkpoint, {shape} expected"
            )

    t = config.talker
    assert t.code_predictor is not None
    torch_dtype = DTYPES[dtype]
    with torch.device(device):
        talker = Talker(t, max_positions, ops).to(torch_dtype).eval()
        _rope_in_float32(talker.stack)
    with torch.no_grad():
        _fill_stack(talker.stack, tensors, "talker.model")
        talker.codec_embedding.copy_(tensors["talker.model.codec_embedding.weight"])
        talker.text_embedding.copy_(tensors["talker.model.text_embedding.weight"])
        talker.codec_head.copy_(tensors["talker.codec_head.weight"])
        talker.text_fc1.copy_(tensors["talker.text_projection.linear_fc1.weight"])
        talker.text_fc1_bias.copy_(tensors["talker.text_projection.linear_fc1.bias"])
        talker.text_fc2.copy_(tensors["talker.text_projection.linear_fc2.weight"])
        talker.text_fc2_bias.copy_(tensors["talker.text_projection.linear_fc2.bias"])
    predictor = None
    if t.num_code_groups > 1:
        predictor = _load_predictor(t, tensors, device, torch_dtype, ops)
    if weights == "fp8":
        for module in (talker, predictor):
            if module is not None:
                fp8.quantize_stack(module.stack)
    say(f"loaded {sum(v.numel() for v in tensors.values()) / 1e6:.1f}M talker parameters")
    del tensors  # the checkpoint's bf16 copy on the device: only the model's own weights stay
    model = LoadedModel(
        path=path, config=config, talker=talker, predictor=predictor, weights=weights
    )
    sizes = model.weight_bytes()
    say(
        f"weights: {sizes['total'] / 2**30:.2f} GiB, of which the decoder layers' matrices "
        f"{sizes['decoder_matrices'] / 2**30:.2f} GiB ({weights})"
    )
    return model


def _rope_in_float32(stack: DecoderStack) -> None:
    # RoPE tables stay float32 (cast per use, like the reference): rebuild them
    # after the dtype cast rounded them.
    stack.rope = RotaryTable(
        stack.config.head_dim, stack.config.rope_theta, stack.rope.cos.shape[0]
    )


@torch.no_grad()
def _load_predictor(
    t: TalkerConfig,
    tensors: dict[str, torch.Tensor],
    device: str,
    dtype: torch.dtype,
    ops: TalkerOps,
) -> CodePredictor:
    assert t.code_predictor is not None
    with torch.device(device):
        predictor = CodePredictor(t.code_predictor, t.hidden_size, ops).to(dtype).eval()
        _rope_in_float32(predictor.stack)
    _fill_stack(predictor.stack, tensors, "talker.code_predictor.model")
    groups = t.code_predictor.num_code_groups - 1
    predictor.codec_embedding.copy_(
        torch.stack(
            [
                tensors[f"talker.code_predictor.model.codec_embedding.{g}.weight"]
                for g in range(groups)
            ]
        )
    )
    predictor.lm_head.copy_(
        torch.stack([tensors[f"talker.code_predictor.lm_head.{g}.weight"] for g in range(groups)])
    )
    if predictor.has_projection:
        predictor.projection.copy_(tensors["talker.code_predictor.small_to_mtp_projection.weight"])
        predictor.projection_bias.copy_(
            tensors["talker.code_predictor.small_to_mtp_projection.bias"]
        )
    predictor.prepare()
    return predictor


def _fill_stack(stack: DecoderStack, tensors: dict[str, torch.Tensor], prefix: str) -> None:
    for i, layer in enumerate(stack.layers):
        p = f"{prefix}.layers.{i}"
        layer.qkv.copy_(torch.cat([tensors[f"{p}.self_attn.{n}_proj.weight"] for n in "qkv"]))
        layer.o.copy_(tensors[f"{p}.self_attn.o_proj.weight"])
        layer.q_norm.copy_(tensors[f"{p}.self_attn.q_norm.weight"])
        layer.k_norm.copy_(tensors[f"{p}.self_attn.k_norm.weight"])
        layer.gate_up.copy_(
            torch.cat([tensors[f"{p}.mlp.gate_proj.weight"], tensors[f"{p}.mlp.up_proj.weight"]])
        )
        layer.down.copy_(tensors[f"{p}.mlp.down_proj.weight"])
        layer.input_norm.copy_(tensors[f"{p}.input_layernorm.weight"])
        layer.post_attention_norm.copy_(tensors[f"{p}.post_attention_layernorm.weight"])
    stack.norm.copy_(tensors[f"{prefix}.norm.weight"])
