"""Triton kernels for the decode step (imports only torch and triton)."""
