"""ttsfleet runtime: the Qwen3-TTS engine and the HTTP server each GPU pod runs.

Importing this package must stay cheap and torch-free: the operator reads the
metric catalogue (`ttsfleet_runtime.metrics`) without the engine's dependencies.
"""
