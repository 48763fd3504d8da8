"""The runtime's settings catalogue: the one place that names them.

Every setting of one runtime pod is one field of `ServerSettings` below, declared
with `setting(...)`: its type (the annotation), default, help text, bounds, the
`serve` flag and the `TTSFLEET_*` environment variable that is the flag's default.
Everything else derives from these fields:

- `ttsfleet-runtime serve` builds its flags from `SETTINGS` (runtime/cli.py), each
  defaulting to its variable, so a pod is configured by environment alone;
- the operator renders the engine ConfigMap with `environment(...)` (names and
  spellings from here) and takes the TTSService `spec.engine` defaults and bounds
  from `Setting.field_args()`; tests check that the CRD, this catalogue and
  `TTSEngine` agree.

This module imports the standard library only: the operator, which must not pull in
torch, imports it (as it does the metric catalogue, `ttsfleet_runtime.metrics`).

Adding a setting is one field here, then reading `settings.<name>` where it is used:

    # WebSocket sessions idle this long are closed.
    ws_idle_timeout_s: float = setting(60.0, "seconds a WebSocket session may stay idle", minimum=0)

gives `--ws-idle-timeout` and `TTSFLEET_WS_IDLE_TIMEOUT`: the flag is the field name in
kebab case with a trailing `_s` (seconds) dropped, the variable is `TTSFLEET_` and the
flag in upper snake case. Pass `flag=` or `env=` only to keep an existing name,
`flag=None` for a setting taken from the environment only (secrets: not in `ps`).
Supported types: str, int, float, bool (spelled by `words`), Path, `X | None`
(unset: None) and tuple[str, ...] (comma-separated).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_PREFIX = "TTSFLEET_"
_KEY = "ttsfleet_setting"  # where setting() keeps its declaration in a field's metadata


def setting(
    default: Any,
    help: str,
    *,
    flag: str | None = "",
    env: str = "",
    choices: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    off: float | None = None,
    words: tuple[str, str] = ("on", "off"),
    required: bool = False,
) -> Any:
    """Declare one ServerSettings field; see the module docstring for the names it gets.

    `minimum`/`maximum` are inclusive bounds the CLI and the CRD enforce; `off`: a
    value below `minimum` that is allowed too, because it turns the setting off (0
    keeps voices forever, where 1e-12 days would erase each at once); `words` spell
    a bool's True and False on the command line and in the environment; `required`: the
    server refuses to start without it (`default` is then only ServerSettings' own).
    """
    declared = dict(
        help=help,
        flag=flag,
        env=env,
        choices=choices,
        minimum=minimum,
        maximum=maximum,
        off=off,
        words=words,
        required=required,
    )
    return dataclasses.field(default=default, metadata={_KEY: declared})


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Everything an operator of one runtime pod can set, in one frozen object."""

    model: str = setting("", "checkpoint dir or hub id", required=True)
    model_revision: str | None = setting(
        None, "hub branch, tag or commit (when --model is a hub id)"
    )
    # A model cache's files are checked against its marker at start (model_cache.check_cache):
    # sizes and each file's ends by default (a read of 2 MiB a file), every byte on demand.
    verify_model: str = setting(
        "sample",
        "how a model cache's files are checked against its marker at start: sizes and the "
        "first and last MiB of each file, or every byte's sha256",
        choices=("sample", "full"),
    )
    # The speech tokenizer rate the pod's TTSService names (spec.model.tokenizerRateHz):
    # a checkpoint of another rate is refused at start, not served at the wrong one.
    tokenizer_rate_hz: int | None = setting(
        None,
        "refuse a checkpoint whose speech tokenizer is not this rate (12 or 25); unset: any",
        minimum=12,
        maximum=25,
    )
    device: str = setting("cuda", "cpu or cuda")
    host: str = setting("0.0.0.0", "address to listen on")
    port: int = setting(8000, "HTTP port", minimum=1, maximum=65535)
    # Name clients pass as `model`; defaults to the engine's own model name.
    served_model_name: str | None = setting(None, "model id clients send")
    # Auth: keys from a file (a mounted Secret, one 'KEY' or 'TENANT: KEY' per line) and/or env.
    api_keys_file: Path | None = setting(
        None, "one 'KEY' or 'TENANT: KEY' per line, e.g. a mounted Secret"
    )
    api_keys: tuple[str, ...] = setting((), "API keys, comma-separated", flag=None)
    auth_disabled: bool = setting(
        False,
        "'disabled' turns API keys off explicitly",
        flag="--auth",
        words=("disabled", "enabled"),
    )
    # Uploaded voices live here (a PVC in Kubernetes); None means uploads are off.
    voices_dir: Path | None = setting(
        None, "where uploaded voices live (a PVC); unset disables uploads"
    )
    # One voice store shared by every replica of a TTSService (Redis); unset: voices_dir
    # on this pod. A URL may carry a password, so it comes from the environment only.
    voice_store_url: str | None = setting(
        None,
        "shared voice store, redis://[:password@]host:port/db or rediss://; unset: voices_dir",
        flag=None,
    )
    # Uploaded voices are erased everywhere (audio, prompt, consent, caches) this many
    # days after upload; 0 keeps them until deleted. Less than an hour would erase each
    # voice about as soon as it is stored; past a century the expiry dates leave what
    # the stores and the calendar hold (3,000,000 days is after the year 9999).
    voice_retention_days: float = setting(
        30.0,
        "days an uploaded voice is kept (one hour to a century); 0 keeps voices until deleted",
        minimum=1 / 24,
        maximum=36_500,
        off=0,
    )
    # With auth disabled every caller is one tenant ("anonymous") that could list and
    # erase every voice: uploads stay off then unless this says otherwise.
    anonymous_voices: bool = setting(
        False, "with --auth disabled: allow uploads that every caller shares"
    )
    # What one tenant may keep in voices_dir (voices, and bytes of all their files).
    max_voices_per_tenant: int = setting(20, "uploaded voices one tenant may keep", minimum=0)
    max_voice_bytes_per_tenant: int = setting(
        32 * 1024 * 1024, "bytes of voice files one tenant may keep", minimum=0
    )
    # Every voice store call is bounded: past this a request gets 503 + Retry-After
    # instead of waiting on a frozen store (and Redis' socket timeout is the same).
    voice_store_timeout_s: float = setting(
        5.0, "seconds one voice store call may take before 503", minimum=0.1, maximum=60
    )
    # While the store cannot be reached, erasures made through other pods go unheard:
    # a pod speaks cached voices at most this long after it last reached the store.
    voice_cache_stale_s: float = setting(
        30.0,
        "seconds a pod speaks cached voices without reaching the voice store",
        minimum=1,
        maximum=3600,
    )
    # The response cache (server/response_cache/): audio made once for a request that
    # is meant to be reproducible (a seed, or `cache: true`) and served again from the
    # pod's memory, the fleet's Redis or an S3-compatible bucket, fastest first.
    # Off by default: a server caches only where its operator says so (spec.cache).
    response_cache_memory_bytes: int = setting(
        0,
        "bytes of cached responses this pod keeps in memory (least recently used out); 0: none",
        minimum=0,
    )
    # Larger responses are served but never cached: one long audiobook chapter must not
    # push every intro and outro out of memory, nor make a Redis value of many MiB.
    response_cache_max_object_bytes: int = setting(
        8 * 1024 * 1024, "largest response the cache keeps", minimum=1024
    )
    # The URL may carry a password: from the environment only (a Secret).
    response_cache_redis_url: str | None = setting(
        None,
        "Redis for cached responses, redis://[:password@]host:port/db or rediss://; unset: no Redis level",
        flag=None,
    )
    response_cache_redis_ttl_s: float = setting(
        86_400.0,
        "seconds a cached response stays in Redis",
        minimum=60,
        maximum=30 * 86_400,
    )
    response_cache_s3_endpoint: str | None = setting(
        None, "S3-compatible endpoint URL for cached responses; unset: no S3 level"
    )
    response_cache_s3_bucket: str | None = setting(None, "bucket of cached responses")
    response_cache_s3_prefix: str = setting(
        "ttsfleet-cache", "key prefix of cached responses in the bucket"
    )
    response_cache_s3_region: str = setting("us-east-1", "region the S3 requests are signed for")
    # Credentials from the environment only (a Secret), never a flag: flags show in `ps`.
    response_cache_s3_access_key: str | None = setting(None, "S3 access key id", flag=None)
    response_cache_s3_secret_key: str | None = setting(None, "S3 secret access key", flag=None)
    # Checked on every read (an older object is a miss); the bucket's lifecycle rule of
    # as many days removes what nobody reads again (docs/response-cache.md).
    response_cache_s3_ttl_days: float = setting(
        30.0, "days a cached response is served from S3", minimum=1 / 24, maximum=3650
    )
    # A slow cache level costs a request at most this long before it is a miss.
    response_cache_timeout_s: float = setting(
        1.0,
        "seconds one Redis or S3 cache call may take before it counts as a miss",
        minimum=0.05,
        maximum=30,
    )
    # --- batch synthesis jobs (issue 33 part 2; server/batch/, docs/batch.md) ---
    # OpenAI's /v1/files and /v1/batches, their state and work queue in the response
    # cache's Redis and their files and audio in its bucket (one store per TTSService).
    batch_api: bool = setting(
        False, "serve /v1/files and /v1/batches (needs the response cache's Redis and S3)"
    )
    # The worker claims items only while no interactive request waits, and the engine
    # gives its rows the slots interactive requests leave (SynthesisRequest.priority).
    batch_worker_concurrency: int = setting(
        0,
        "batch items this pod synthesises at once on spare capacity; 0: no batch worker",
        minimum=0,
        maximum=1024,
    )
    # The worker holds fewer items while interactive requests' p95 time to first audio is
    # over this (server/batch/pacing.py): batch work yields to interactive traffic.
    batch_ttfa_budget_s: float = setting(
        0.05,
        "interactive p95 time to first audio (seconds) beyond which the batch worker backs off",
        minimum=0.001,
    )
    # A worker renews its claim at a third of this; a claim not renewed (the pod died or
    # was partitioned) returns its item to the queue once it lapses.
    batch_lease_s: float = setting(
        30.0, "seconds a worker's claim on a batch item lasts unless renewed", minimum=1
    )
    batch_max_file_bytes: int = setting(
        64 * 1024 * 1024, "largest batch input file upload", minimum=1024
    )
    batch_max_items: int = setting(50_000, "most requests one batch may hold", minimum=1)
    batch_s3_prefix: str = setting(
        "ttsfleet-batch", "key prefix of batch files and audio in the bucket"
    )
    # --- end of batch synthesis jobs ---
    # Engine sizing, passed through to the engine. The TTSService CRD takes its
    # spec.engine defaults and bounds from these entries: what a pod gets by default
    # and what `serve` gets by default are the same. The talker's KV cache is paged: a
    # stream holds 112 KiB per position (0.6B and 1.7B, bf16) for the positions it has,
    # from a pool of `kv_cache_memory` of the GPU memory left after the weights; on an
    # 80 GB H100 that is ~37 GB, ~330,000 positions: 256 streams of 10 s take ~6 GB.
    max_batch: int = setting(256, "streams decoded together (batch slots)", minimum=1, maximum=1024)
    # Positions of one stream: its prompt and frames (12.5 a second of audio at 12 Hz,
    # 25 at 25 Hz: 4,608 hold ~6 or ~3 minutes). Memory is taken as a stream grows, so
    # this costs only a table entry per 64 positions.
    max_len: int = setting(
        4608, "KV positions one stream may use (prompt + frames)", minimum=256, maximum=65536
    )
    kv_cache_memory: float = setting(
        0.5,
        "share of the GPU memory free after the weights that the KV cache takes",
        minimum=0.01,
        maximum=0.95,
    )
    # Admission always queues first: 0 would refuse every request with 429.
    max_queue: int = setting(256, "waiting requests before 429", minimum=1, maximum=100000)
    dtype: str | None = setting(
        None,
        "default: bfloat16 on cuda, float32 on cpu",
        choices=("bfloat16", "float16", "float32"),
    )
    # fp8 (e4m3) halves the bytes a decode step reads for the decoder layers' matrices,
    # quantized at load from the bf16 checkpoint; embeddings, heads, norms and the codec
    # stay in `dtype` (runtime/ttsfleet_runtime/model/fp8.py). A GPU needs compute
    # capability 8.9+ (L4, L40S, H100, H200); the CPU computes the same product in torch.
    weights: str = setting(
        "bf16",
        "the decoder layers' weights: bf16 (as the checkpoint) or fp8 (e4m3, quantized at load)",
        choices=("bf16", "fp8"),
    )
    cuda_graphs: bool = setting(True, "capture decode steps as CUDA graphs")
    # Triton's cache, kept across restarts (a volume): a warm
    # start loads its kernels instead of compiling them (engine/compile_cache.py).
    compile_cache_dir: Path | None = setting(
        None, "keep compiled kernels here across restarts (a volume); unset: Triton's default"
    )
    first_chunk_frames: int = setting(
        2,
        "codec frames in the first audio chunk (time to first audio vs. overhead)",
        minimum=1,
        maximum=32,
    )
    # After the first chunk each chunk is as long as all the audio before it, up to
    # this (2, 2, 4, 8, 8 ...): longer steady chunks mean fewer, larger codec calls.
    chunk_frames: int = setting(
        8,
        "codec frames in a steady audio chunk (where the chunk ramp stops)",
        minimum=1,
        maximum=64,
    )
    # The codec's dense convolutions on a GPU: the Triton implicit-GEMM kernel with the
    # activation fused (kernels/conv1d.py), cuDNN on channels-last views, one cuBLAS product
    # over the input windows, the last two with a fused epilogue, or "routed": the Triton
    # kernel where each stream brings many samples, the product where it brings few
    # (speech_tokenizer/rate12/convs.py route_for). The default is what served best under
    # load (`bench capacity`, routes against each other in one H100 lease: docs/benchmarks.md).
    codec_conv_route: str = setting(
        "routed",
        "GPU convolutions of the codec decoder",
        choices=("triton", "cudnn", "gemm", "routed"),
    )
    # Decode steps set every stream's pace; codec calls have the lead of the audio
    # already sent. On: the engine thread's kernels run on a high-priority CUDA stream,
    # so the codec's thread blocks wait for free multiprocessors behind them.
    decode_priority: bool = setting(
        False, "decode on a high-priority CUDA stream (codec work yields to it)"
    )
    # Bounds the GPU time a single request can hold a slot (and random-weight
    # models never stop by themselves). It covers the whole request: 4,096
    # characters of English (max_input_chars) is about 270 s of speech.
    max_audio_seconds: float = setting(
        360.0, "longest utterance one request may generate", minimum=0.1
    )
    drain_timeout_s: float = setting(30.0, "seconds in-flight streams get after SIGTERM", minimum=0)
    # Backpressure for clients that stop reading (docs/security.md): a stream whose
    # client leaves more audio than this untaken stops generating (it keeps its slot,
    # its decode steps wait) until the client takes half of it. This bounds what one
    # stream holds in memory; the send timeout below ends streams nobody reads.
    stream_buffer_seconds: float = setting(
        10.0,
        "seconds of audio a stream may have waiting for its client before generation pauses",
        minimum=0.5,
        maximum=3600,
    )
    # A response (HTTP or WebSocket) whose client takes nothing for this long, while
    # the server has more to send than the connection's write buffer holds, is cut:
    # the connection is dropped, its generation cancelled and its batch slot freed.
    send_timeout_s: float = setting(
        30.0,
        "seconds a client may take nothing of a response before the connection is dropped",
        minimum=1,
        maximum=3600,
    )
    # Per-key token bucket.
    rate_limit_per_s: float = setting(
        0.0, "requests per second per API key, 0 = off", flag="--rate-limit", minimum=0
    )
    rate_limit_burst: int = setting(10, "requests a key may send at once", minimum=1)
    # Limits on what a client may send.
    max_body_bytes: int = setting(
        64 * 1024, "largest request body (and WebSocket message)", minimum=1
    )
    max_input_chars: int = setting(4096, "longest input text", minimum=1)
    max_voice_upload_bytes: int = setting(10 * 1024 * 1024, "largest voice upload", minimum=1)
    min_voice_seconds: float = setting(
        1.0, "shortest reference audio a voice upload may have", minimum=0
    )
    max_voice_seconds: float = setting(
        30.0, "longest reference audio a voice upload may have", minimum=0
    )
    ws_config_timeout_s: float = setting(
        10.0, "seconds a WebSocket session has to send its config message", minimum=0.1
    )
    # A session waiting on its client (nothing left to say) this long is closed.
    ws_idle_timeout_s: float = setting(
        30.0,
        "seconds a WebSocket session may wait on its client before it is closed",
        minimum=0.1,
    )
    # An unflushed utterance that gets no text this long is flushed, so the engine
    # finishes what it has and frees the batch slot.
    ws_text_stall_s: float = setting(
        5.0,
        "seconds without text after which an open WebSocket utterance is flushed",
        minimum=0.1,
    )
    ws_max_sessions_per_key: int = setting(
        8, "open WebSocket sessions per API key, 0 = no limit", minimum=0
    )
    # Failed authentications per client address: a burst, then this rate.
    auth_failure_rate_per_s: float = setting(
        1.0,
        "failed authentications per second per client address after the burst",
        flag="--auth-failure-rate",
        minimum=0,
    )
    auth_failure_burst: int = setting(
        20, "failed authentications a client address may make at once", minimum=1
    )
    # HTTP: the request line and headers must arrive within this time and size, the
    # body within its own time; idle keep-alive connections are closed. A timeout of
    # 0 would refuse every request (408), so they are positive.
    http_header_timeout_s: float = setting(
        10.0, "seconds for a request's line and headers to arrive", minimum=0.1
    )
    http_body_timeout_s: float = setting(
        60.0, "seconds for a request's body to arrive", minimum=0.1
    )
    http_keep_alive_s: float = setting(
        5.0, "seconds an idle keep-alive connection stays open", minimum=0
    )
    max_header_bytes: int = setting(
        16 * 1024, "request line and headers; larger is refused with 431", minimum=1024
    )
    log_level: str = setting(
        "info", "how much to log", choices=("debug", "info", "warning", "error", "critical")
    )


@dataclasses.dataclass(frozen=True)
class Setting:
    """One catalogue entry, as the CLI and the operator read it."""

    name: str  # the ServerSettings field
    kind: type  # str, int, float, bool, Path or tuple
    optional: bool  # `X | None`: unset (or empty) is None
    default: Any
    help: str
    flag: str | None  # None: from the environment only
    env: str
    choices: tuple[str, ...] | None
    minimum: float | None
    maximum: float | None
    off: float | None  # allowed below `minimum`: turns the setting off
    words: tuple[str, str]  # a bool's True and False
    required: bool

    def parse(self, text: str) -> Any:
        """A flag's or variable's text -> the value; ValueError says what is wrong."""
        if self.optional and text == "":
            return None
        if self.kind is bool:
            if text not in self.words:
                raise ValueError(f"expected {' or '.join(self.words)}, got {text!r}")
            return text == self.words[0]
        if self.kind is tuple:
            return tuple(item.strip() for item in text.split(",") if item.strip())
        try:
            value = self.kind(text)
        except ValueError:
            raise ValueError(
                f"expected {'a number' if self.kind is float else 'an integer'}, got {text!r}"
            ) from None
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        """Raise ValueError if `value` is outside this setting's choices or bounds."""
        if value is None:
            return
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"expected one of {', '.join(self.choices)}, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"expected a finite number, got {value!r}")
        if self.off is not None and value == self.off:
            return
        if self.minimum is not None and value < self.minimum:
            off = f" (or {self.off:g}: off)" if self.off is not None else ""
            raise ValueError(f"must be at least {self.minimum:g}{off}, got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"must be at most {self.maximum:g}, got {value!r}")

    def format(self, value: Any) -> str:
        """The value as its variable's text (what `parse` reads back)."""
        if self.kind is bool:
            return self.words[0] if value else self.words[1]
        if self.kind is tuple:
            return ",".join(value)
        return str(value)

    def field_args(self) -> dict[str, Any]:
        """Default and bounds as keyword arguments of a pydantic `Field` (the CRD's).
        With `off` the lower bound is `off`: the model adds a rule for the gap above it."""
        lowest = self.minimum if self.off is None else min(self.off, self.minimum or self.off)
        bounds = {"ge": lowest, "le": self.maximum}
        return {"default": self.default, **{k: v for k, v in bounds.items() if v is not None}}


def _kind(annotation: Any) -> tuple[type, bool]:
    """(base type, optional) of an annotation such as `int`, `Path | None`, `tuple[str, ...]`."""
    arguments = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = len(arguments) < len(typing.get_args(annotation))
    base = arguments[0] if optional else annotation
    base = typing.get_origin(base) or base
    if base not in (str, int, float, bool, Path, tuple):
        raise TypeError(f"settings cannot be of type {annotation!r}")
    return base, optional


def _catalogue() -> dict[str, Setting]:
    hints = typing.get_type_hints(ServerSettings)
    entries = {}
    for field in dataclasses.fields(ServerSettings):
        declared = dict(field.metadata[_KEY])
        if declared["flag"] == "":
            declared["flag"] = "--" + field.name.removesuffix("_s").replace("_", "-")
        if declared["env"] == "":
            stem = (declared["flag"] or field.name)[2 if declared["flag"] else 0 :]
            declared["env"] = ENV_PREFIX + stem.upper().replace("-", "_")
        kind, optional = _kind(hints[field.name])
        entries[field.name] = Setting(
            name=field.name, kind=kind, optional=optional, default=field.default, **declared
        )
    return entries


SETTINGS: dict[str, Setting] = _catalogue()
"""Every setting by ServerSettings field name, in declaration order."""

BY_ENV: dict[str, Setting] = {s.env: s for s in SETTINGS.values()}


def environment(values: Mapping[str, Any]) -> dict[str, str]:
    """`TTSFLEET_*` variables for these settings (by field name), as the server reads them.

    None leaves a variable out (the server's default applies). A value the server would
    refuse raises ValueError here, so the operator never renders a ConfigMap that stops
    its pods at start.
    """
    variables = {}
    for name, value in values.items():
        entry = SETTINGS[name]
        if value is None:
            continue
        text = entry.format(value)
        entry.parse(text)
        variables[entry.env] = text
    return variables
