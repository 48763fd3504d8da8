"""Triton kernels for the GPU decode step: decode attention over per-row KV
lengths, fused QK-norm + RoPE + KV write, small-batch matrix products with
their norms and activations fused in, and sampling without a sort.

Each kernel has a torch reference it is tested against (in Triton's
interpreter on a machine with no GPU: tests/conftest.py). This package
imports torch and triton only; a model is handed them as its operations
(model/ops.py `fused()`), a codec decoder as its convolution route
(speech_tokenizer/rate12/convs.py)."""
