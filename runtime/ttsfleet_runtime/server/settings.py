"""Everything an operator of one runtime pod can set, in one frozen object.

The CLI fills it from flags, each flag defaulting to a `TTSFLEET_*` variable so
a Kubernetes pod can be configured by env alone.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    model: str = ""
    # Hub revision (branch, tag or commit) when `model` is a hub id.
    model_revision: str | None = None
    device: str = "cpu"
    host: str = "0.0.0.0"
    port: int = 8000
    # Name clients pass as `model`; defaults to the engine's own model name.
    served_model_name: str | None = None
    # Auth: keys from a file (a mounted Secret, one key per line) and/or env.
    api_keys_file: Path | None = None
    api_keys: tuple[str, ...] = ()
    auth_disabled: bool = False
    # Uploaded voices live here (a PVC in Kubernetes); None means uploads are off.
    voices_dir: Path | None = None
    # Engine sizing, passed through to the engine factory.
    max_batch: int = 16
    max_queue: int = 64
    # None: bfloat16 on CUDA, float32 on CPU.
    dtype: str | None = None
    cuda_graphs: bool = True
    # Codec frames in the first audio chunk (time to first audio vs. overhead).
    first_chunk_frames: int = 2
    # Longest utterance one request may generate: bounds the GPU time a single
    # request can hold a slot (and random-weight models never stop by themselves).
    max_audio_seconds: float = 120.0
    # SIGTERM: how long in-flight streams get to finish before they are cut.
    drain_timeout_s: float = 30.0
    # Per-key token bucket; rate 0 turns rate limiting off.
    rate_limit_per_s: float = 0.0
    rate_limit_burst: int = 10
    # Limits on what a client may send.
    max_body_bytes: int = 64 * 1024
    max_input_chars: int = 4096
    max_voice_upload_bytes: int = 10 * 1024 * 1024
    min_voice_seconds: float = 1.0
    max_voice_seconds: float = 30.0
    # WebSocket sessions must send their config message within this time.
    ws_config_timeout_s: float = 10.0
    # A session waiting on its client (nothing left to say) this long is closed.
    ws_idle_timeout_s: float = 30.0
    # An unflushed utterance that gets no text this long is flushed, so the
    # engine finishes what it has and frees the batch slot.
    ws_text_stall_s: float = 5.0
    # WebSocket sessions one API key may hold open at once; 0 = no limit.
    ws_max_sessions_per_key: int = 8
    # Failed authentications per client address: a burst, then this rate.
    auth_failure_rate_per_s: float = 1.0
    auth_failure_burst: int = 20
    # HTTP: the request line and headers must arrive within this time and size,
    # the body within its own time; idle keep-alive connections are closed.
    http_header_timeout_s: float = 10.0
    http_body_timeout_s: float = 60.0
    http_keep_alive_s: float = 5.0
    max_header_bytes: int = 16 * 1024
    log_level: str = "info"
