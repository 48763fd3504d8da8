"""Kernels are chosen per model, never for the process: a model loaded with the fused
operations (model/ops.py) and its runner change nothing of an eager model beside them.
The fused operations here are stand-ins that refuse to run, so any call of a kernel on
the eager model's path fails the test, whichever kernel it is."""

from __future__ import annotations

import sys

import pytest
import torch

from support.greedy import our_codes
from ttsfleet_runtime.engine import process_switches
from ttsfleet_runtime.engine.model_runner import ModelRunner
from ttsfleet_runtime.kernels import decode_attention, rope_kv, row_ops
from ttsfleet_runtime.kernels import linear as kernel_linear
from ttsfleet_runtime.kernels import sampling as kernel_sampling
from ttsfleet_runtime.model import layers
from ttsfleet_runtime.model import ops as talker_ops
from ttsfleet_runtime.model.weights import load_model

KERNELS = [
    (row_ops, "rms_norm"),
    (row_ops, "qk_norm_rope"),
    (row_ops, "silu_mul"),
    (rope_kv, "qk_norm_rope_write"),
    (decode_attention, "decode_attention"),
    (kernel_linear, "linear"),
    (kernel_sampling, "sample"),
]


@pytest.fixture
def kernels_refused(monkeypatch) -> list[str]:
    """Every fused operation replaced by one that records its name and raises."""
    ran: list[str] = []
    for module, name in KERNELS:
        qualified = f"{module.__name__}.{name}"

        def refuse(*args, qualified=qualified, **kwargs):
            ran.append(qualified)
            raise AssertionError(f"{qualified} ran for the eager model")

        monkeypatch.setattr(module, name, refuse)
    return ran


def test_an_eager_model_runs_eager_beside_a_fused_one(tiny_custom_voice, kernels_refused):
    fused = load_model(
        tiny_custom_voice, "cpu", "float32", max_positions=128, ops=talker_ops.fused()
    )
    ModelRunner(fused, max_batch=2, max_len=128, max_text=64, device="cpu", cuda_graphs=False)
    # The fused model holds the kernels (here the stand-ins) in every layer...
    assert fused.talker.stack.layers[0].ops.decode_attention is decode_attention.decode_attention
    assert fused.predictor.stack.layers[-1].ops.qk_norm_rope_write is rope_kv.qk_norm_rope_write
    assert fused.talker.ops.sample is kernel_sampling.sample
    # ...and a model loaded after it, and its runner, run torch's definitions only.
    codes = our_codes(tiny_custom_voice, "Only torch here.", "ryan", None, "english", 3)
    assert len(codes) >= 1
    assert kernels_refused == []


def test_a_model_loaded_eager_holds_the_eager_operations(tiny_custom_voice):
    talker_ops.fused()
    model = load_model(tiny_custom_voice, "cpu", "float32", max_positions=64)
    for stack in (model.talker.stack, model.predictor.stack):
        assert stack.ops is talker_ops.EAGER
        assert all(layer.ops is talker_ops.EAGER for layer in stack.layers)
    assert talker_ops.EAGER.linear is layers.linear_eager


def test_serving_on_a_gpu_turns_cudnn_attention_off_and_a_cpu_leaves_it():
    """The process-wide switches are the serving process's (engine/process_switches.py),
    set at its start, not by an engine's constructor."""
    was, interval = torch.backends.cuda.cudnn_sdp_enabled(), sys.getswitchinterval()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        sys.setswitchinterval(0.005)
        process_switches.set_for_serving("cpu")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        # The engine thread takes the interpreter lock back sooner, on any device.
        assert sys.getswitchinterval() == pytest.approx(process_switches.GIL_SWITCH_INTERVAL_S)
        assert sys.getswitchinterval() < 0.005
        process_switches.set_for_serving("cuda:0")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
        sys.setswitchinterval(interval)
