"""The talker's weights read in one copy per file: every tensor equal to what
safetensors' own reader gives (values, dtype, shape), wherever it lies in the file,
including at offsets that are no multiple of its element size."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ttsfleet_runtime.model.weights import SAFETENSORS_DTYPES, read_safetensors, read_tensors

NAMES = {dtype: name for name, dtype in SAFETENSORS_DTYPES.items()}


def by_safetensors(file: Path) -> dict[str, torch.Tensor]:
    with safe_open(str(file), framework="pt", device="cpu") as f:
        return {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (no __iter__)


def assert_same(read: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert sorted(read) == sorted(expected)
    for key, tensor in expected.items():
        assert read[key].dtype == tensor.dtype and read[key].shape == tensor.shape, key
        assert torch.equal(read[key], tensor), key


def some_tensors() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "flag": torch.tensor([True, False, True]),  # 3 bytes: what follows may be misaligned
        "bf16": torch.randn(3, 5, generator=g).to(torch.bfloat16),
        "f32": torch.randn(7, generator=g),
        "i64": torch.arange(-4, 5),
        "f16": torch.randn(2, 3, generator=g).to(torch.float16),
        "f64": torch.randn(3, generator=g, dtype=torch.float64),
        "i8": torch.tensor([-3, 4], dtype=torch.int8),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
    }


def write_unaligned(file: Path, tensors: dict[str, torch.Tensor]) -> None:
    """A valid safetensors file with the tensors back to back in the given order and
    no padding, so most lie at offsets no multiple of their element size (the
    safetensors writer aligns them; the format does not ask for it)."""
    header, data, at = {}, b"", 0
    for key, tensor in tensors.items():
        raw = tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        header[key] = {
            "dtype": NAMES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [at, at + len(raw)],
        }
        data += raw
        at += len(raw)
    encoded = json.dumps(header).encode()
    file.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data)


def by_header(file: Path) -> dict:
    raw = file.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + length])


def test_every_tensor_is_what_safetensors_reads(tmp_path):
    file = tmp_path / "aligned.safetensors"
    save_file(some_tensors(), str(file), metadata={"format": "pt"})
    assert_same(read_safetensors(file, "cpu", lambda key: True), by_safetensors(file))


def test_tensors_at_misaligned_offsets_are_read_whole(tmp_path):
    file = tmp_path / "unaligned.safetensors"
    write_unaligned(file, some_tensors())
    starts = {key: e["data_offsets"][0] for key, e in by_header(file).items()}
    assert starts["bf16"] % 2 and starts["f32"] % 4  # the case this test is for
    read = read_safetensors(file, "cpu", lambda key: True)
    assert_same(read, some_tensors())
    assert_same(read, by_safetensors(file))


def test_only_the_wanted_tensors_are_read_and_their_memory_is_their_own(tmp_path):
    file = tmp_path / "some.safetensors"
    write_unaligned(file, some_tensors())
    read = read_safetensors(file, "cpu", lambda key: key in ("bf16", "i64"))
    assert_same(read, {k: v for k, v in some_tensors().items() if k in ("bf16", "i64")})
    # Zeros over the file: tensors that were views of its mapping would change.
    file.write_bytes(bytes(file.stat().st_size))
    assert_same(read, {k: v for k, v in some_tensors().items() if k in ("bf16", "i64")})


def test_an_unknown_dtype_is_named(tmp_path):
    file = tmp_path / "f8.safetensors"
    encoded = json.dumps({"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})
    file.write_bytes(struct.pack("<Q", len(encoded)) + encoded.encode() + b"\0")
    with pytest.raises(ValueError, match="x is F8_E4M3"):
        read_safetensors(file, "cpu", lambda key: True)


def test_the_talker_of_a_checkpoint_is_read_as_safetensors_reads_it(tiny_voice_design):
    expected = {
        key: tensor
        for key, tensor in by_safetensors(tiny_voice_design / "model.safetensors").items()
        if key.startswith("talker.")
    }
    assert expected
    assert_same(read_tensors(tiny_voice_design), expected)
