"""A random stand-in for campplus.onnx, the x-vector model of 25 Hz speech tokenizers.

The real file is CAM++ (a densely connected TDNN, about 7M parameters) exported to
ONNX. Its weights cannot be downloaded here, and its architecture is nobody's business
but the file's: the runtime, like the reference, hands the graph mean-normalised kaldi
fbank features [1, T, 80] and takes the [1, 192] output, whatever the graph computes in
between. So a small graph with the same interface serves tests and benchmarks: a
per-frame two-layer MLP, mean and standard-deviation pooling over time, and a linear
projection, with random weights. Every frame changes the output, so an x-vector parity
test catches a wrong feature anywhere in the utterance.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

FBANK_BINS = 80
_HIDDEN = 128
_OPSET = 17
_IR_VERSION = 8  # the IR version of opset 17: what older onnxruntime builds read


def write_random_campplus(path: str | Path, out_dim: int = 192, seed: int = 0) -> Path:
    """Write an ONNX graph fbank [1, T, 80] -> x-vector [1, out_dim] with random weights."""
    from onnx import TensorProto, checker, helper, numpy_helper, save_model

    rng = np.random.default_rng(seed)

    def weight(name: str, rows: int, cols: int):
        values = rng.standard_normal((rows, cols)) / np.sqrt(rows)
        return numpy_helper.from_array(values.astype(np.float32), name)

    def bias(name: str, n: int):
        return numpy_helper.from_array((rng.standard_normal(n) * 0.1).astype(np.float32), name)

    initializers = [
        weight("w1", FBANK_BINS, _HIDDEN),
        bias("b1", _HIDDEN),
        weight("w2", _HIDDEN, _HIDDEN),
        bias("b2", _HIDDEN),
        weight("w_out", 2 * _HIDDEN, out_dim),
        bias("b_out", out_dim),
    ]
    nodes = [
        helper.make_node("MatMul", ["feats", "w1"], ["h1"]),
        helper.make_node("Add", ["h1", "b1"], ["h1b"]),
        helper.make_node("Relu", ["h1b"], ["a1"]),
        helper.make_node("MatMul", ["a1", "w2"], ["h2"]),
        helper.make_node("Add", ["h2", "b2"], ["h2b"]),
        helper.make_node("Tanh", ["h2b"], ["a2"]),
        helper.make_node("ReduceMean", ["a2"], ["mean"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["a2", "a2"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["mean_sq"], axes=[1], keepdims=0),
        helper.make_node("Mul", ["mean", "mean"], ["mean2"]),
        helper.make_node("Sub", ["mean_sq", "mean2"], ["var"]),
        helper.make_node("Relu", ["var"], ["var_pos"]),
        helper.make_node("Sqrt", ["var_pos"], ["std"]),
        helper.make_node("Concat", ["mean", "std"], ["stats"], axis=1),
        helper.make_node("MatMul", ["stats", "w_out"], ["proj"]),
        helper.make_node("Add", ["proj", "b_out"], ["embs"]),
    ]
    graph = helper.make_graph(
        nodes,
        "campplus_random",
        [helper.make_tensor_value_info("feats", TensorProto.FLOAT, [1, "frames", FBANK_BINS])],
        [helper.make_tensor_value_info("embs", TensorProto.FLOAT, [1, out_dim])],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", _OPSET)],
        producer_name="ttsfleet random checkpoint",
    )
    model.ir_version = _IR_VERSION
    checker.check_model(model)
    path = Path(path)
    save_model(model, str(path))
    return path
