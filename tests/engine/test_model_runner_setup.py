"""Start-up of the model runner and the engine's identity: graph capture
reports its progress as it goes, and a hub model is named after its hub id
at the revision asked for."""

from __future__ import annotations

import torch

from ttsfleet_runtime.engine import tts_engine
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.model.weights import load_model


def test_capture_all_reports_decode_progress_then_the_prefill_graphs(tiny_checkpoint, monkeypatch):
    """Capture needs CUDA; the loop and its reporting are what is tested, with
    each capture recorded instead of run."""
    model = load_model(tiny_checkpoint, "cpu", "float32", max_positions=4608)
    runner = ModelRunner(
        model, max_batch=32, max_len=4608, max_text=64, device="cpu", cuda_graphs=False
    )
    runner.use_graphs = True
    captured = []
    monkeypatch.setattr(runner, "capture", lambda B: captured.append(("decode", B)))
    monkeypatch.setattr(runner, "_capture_prefill", lambda P: captured.append(("prefill", P)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    said: list[str] = []

    runner.capture_all(said.append)

    decode = [c for c in captured if c[0] == "decode"]
    prefill = [c for c in captured if c[0] == "prefill"]
    # One decode graph per batch bucket: each attends over the whole cache, so
    # no graph per KV length.
    assert decode == [("decode", B) for B in (32, 24, 16, 8, 4, 2, 1)]
    assert captured.index(prefill[0]) > captured.index(decode[-1])
    assert said == [
        "captured 4/7 decode graphs (batch 8)",
        "captured 7/7 decode graphs (batch 1)",
        f"captured {len(prefill)} prefill graphs (up to 1024 positions)",
    ]


def test_a_hub_model_is_named_after_its_id_and_fetched_at_its_revision(
    tiny_checkpoint, monkeypatch
):
    fetched = []

    def resolve(model, revision=None):
        fetched.append((model, revision))
        return tiny_checkpoint  # what the hub cache would hold, under a hash-named folder

    monkeypatch.setattr(tts_engine, "resolve_checkpoint", resolve)
    engine = tts_engine.TTSEngine.from_pretrained(
        "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", revision="v1.1"
    )
    assert fetched == [("Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice", "v1.1")]
    assert engine.info.name == "Qwen3-TTS-12Hz-0.6B-CustomVoice"


def test_a_local_checkpoint_is_named_after_its_folder(tiny_checkpoint):
    assert tts_engine.model_name(str(tiny_checkpoint)) == tiny_checkpoint.name
