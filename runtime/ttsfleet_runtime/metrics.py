"""The runtime's Prometheus metric catalogue: the one place that names them.

The HPA (through prometheus-adapter), the canary analysis and the dashboards
read these names, so they are a public contract: rename only with a migration.
This module imports nothing heavy (prometheus_client only); the operator imports
it for the names, the server builds its collectors with `RuntimeMetrics`.

What each metric means, exactly:

- ttsfleet_queue_depth (gauge): requests the engine admitted that wait for a
  batch slot, read from the engine at scrape time. The HPA's `Pods` metric.
- ttsfleet_active_streams (gauge): requests holding a batch slot (generating).
- ttsfleet_paused_streams (gauge): of those, streams whose generation is paused
  because their client has more than --stream-buffer-seconds of audio waiting
  (it stopped or slowed reading); each holds its slot and at most about that
  much audio until it reads again or --send-timeout ends it.
- ttsfleet_ready (gauge): 1 while the pod admits work (engine ready, not draining).
- ttsfleet_gpu_utilization_ratio, ttsfleet_gpu_memory_used_bytes,
  ttsfleet_gpu_memory_total_bytes (gauges, label `gpu` = index): NVML readings,
  present only where an NVIDIA driver is (so clusters without DCGM still scale).
- ttsfleet_kv_cache_used_bytes, ttsfleet_kv_cache_total_bytes (gauges): the
  talker's paged KV cache, read from the engine at scrape time: bytes of the
  blocks streams hold now, and of the whole pool. Memory per stream is used /
  ttsfleet_active_streams; used near total means new streams wait for memory.
- ttsfleet_build_info (gauge, 1): labels version, model, variant, size.
- ttsfleet_requests_total (counter, labels route, code): every finished API
  request by route template and its real outcome as an HTTP status ("101"
  never appears: a WebSocket utterance is counted with the status an HTTP
  request would have had). A response cut after its headers is not a 200:
  499 when the client went away (as nginx counts it), else the status of the
  failure that cut it (500, 503).
- ttsfleet_errors_total (counter, label type): every refusal or failure, at
  most one per request (WebSocket: per session), by the `code` of the error
  the client got. Each type is in exactly one of three groups:
  SERVER_FAULT_ERRORS (the server failed: internal, cuda_oom, engine_error),
  CLIENT_FAULT_ERRORS (what the client sent or did: bad input, text the
  engine finds too long, bad key, limits, a client that left) and
  CAPACITY_ERRORS (load, lifecycle and the voice store: queue_full, draining,
  engine_stopped, voice_store_unavailable, insufficient_storage: a full voices
  disk or Redis at its memory limit).
  The canary analysis and the error-ratio alert count the server's faults
  only, so no client can push a canary into rollback.
- ttsfleet_audio_seconds_total (counter): seconds of audio sent to clients.
- ttsfleet_frames_total (counter): codec frames the engine generated (engine count).
- ttsfleet_stream_lead_min_seconds (gauge): the smallest lead over playback
  among the streams playing at the engine's last step: audio handed out minus
  seconds since the stream's first chunk (playback starts at the first byte).
  Absent while no stream plays. Near 0: streams are about to stall.
- ttsfleet_underrun_steps_total (counter): engine steps at which some playing
  stream's lead was below 0 (its listener had run out of audio).
- ttsfleet_prefill_deferred_total (counter): iterations whose prefill the
  engine cut short to keep a running stream ahead of playback (newcomers
  waited a step so the others would not stall).
- ttsfleet_engine_busy_seconds_total (counter, label phase): seconds the engine's
  threads spent in each phase: the engine thread's plan, prefill, decode (launching
  the step), step_wait (waiting for the step's results once the next iteration is
  prepared: the GPU still busy with it) and postprocess, and the codec thread's
  codec. rate() over wall time is each phase's share: step_wait near 1 means the
  GPU step is the limit; plan/prefill/postprocess high means the host is.
  The engine counters count the warm-up synthesis before ready like any work
  (never set back); the graph captures after ready are not busy time.
- ttsfleet_time_to_first_audio_seconds (histogram): request received -> first
  audio chunk ready to send (streamed responses send it at that moment; a
  whole-file response is sent when the last chunk is ready).
- ttsfleet_request_duration_seconds (histogram): request received -> last audio.
- ttsfleet_real_time_factor (histogram): (last audio - request received) /
  seconds of audio, per request; below 1 is faster than real time.
- ttsfleet_voice_clone_seconds (histogram, label source = upload | request):
  the engine's cloning of one reference recording (speaker encoder and speech
  tokenizer encoder), once per upload, or per speech request that brings its
  own reference (one-shot cloning). Speaking a stored voice costs none.
- ttsfleet_voice_cache_lookups_total (counter, label result = hit | miss):
  stored voices resolved for speech from the pod's prompt cache, or read from
  the voice store (a miss).
- ttsfleet_voice_records_skipped_total (counter, label reason): stored voice
  records a read skipped because they cannot be a voice (voice_store.py
  SKIP_REASONS: profile, wrong_type, index, prompt, consent, link), counted each
  time one is met (a broken record is met on every listing of its tenant); the
  log names each one once. Erase them with `ttsfleet voices delete --id`.
- ttsfleet_response_cache_lookups_total (counter, labels level = memory | redis
  | s3, result = hit | miss): reads of the response cache, level by level, fastest
  first: a request that misses memory and hits Redis counts a memory miss and a
  Redis hit. A corrupt, expired or unreachable entry counts a miss. Hit rate per
  level: hits / (hits + misses) of that level.
- ttsfleet_response_cache_requests_total (counter, label result = hit-memory |
  hit-redis | hit-s3 | miss | bypass): speech requests by what the cache did for
  them; bypass: not meant to be reproducible (no seed, no `cache: true`). A miss
  whose response is over --response-cache-max-object-bytes is served, not stored.
- ttsfleet_response_cache_stored_bytes_total (counter, label level): bytes of
  entries written to each level (fills after a miss, and back-fills after a slower
  level's hit).
- ttsfleet_response_cache_memory_bytes (gauge): bytes of entries this pod holds
  in memory now (at most --response-cache-memory-bytes).
- ttsfleet_response_cache_evictions_total (counter, label level = memory):
  entries dropped to stay within the memory bound.
- ttsfleet_response_cache_corrupt_total (counter, label level): stored entries
  whose length or checksum did not match (served as a miss, deleted).
- ttsfleet_response_cache_errors_total (counter, label level): Redis or S3 calls
  that failed or timed out; the request went on as a miss (a warning is logged).
- ttsfleet_batch_items_total (counter, label outcome = completed | failed |
  released | lost): batch items this pod's worker finished with: recorded done, recorded
  failed (the item's own fault, in the batch's error file), handed back for another
  pod (draining, or a refusal that is not the item's fault), or lost (its lease
  lapsed or was taken, nothing recorded by this pod).
- ttsfleet_batch_audio_seconds_total (counter): seconds of audio of the batch items
  this pod completed (stored in the bucket, not sent to clients).
- ttsfleet_batch_items_held (gauge): batch items the worker synthesises now.
- ttsfleet_batch_items_allowed (gauge): how many its pacing allows now (at most
  --batch-worker-concurrency; fewer while interactive time to first audio is over
  --batch-ttfa-budget).
- ttsfleet_startup_seconds (gauge, label phase): where this process's start
  went, one of STARTUP_PHASES below; the phases up to warm_up follow each
  other and add up to phase="total" (process start -> ready). Set once each
  phase ends, so /metrics (served once ready) shows them all, and
  capture_background once the graphs left for after ready are captured.

Every runtime pod also carries the label `track` (stable|canary), which
Prometheus keeps: the canary analysis compares the two by it.
"""

from __future__ import annotations

from collections.abc import Callable

PREFIX = "ttsfleet_"

# Gauges
QUEUE_DEPTH = "ttsfleet_queue_depth"  # requests admitted, waiting for a batch slot
ACTIVE_STREAMS = "ttsfleet_active_streams"  # requests generating now
PAUSED_STREAMS = "ttsfleet_paused_streams"  # of those, paused for a client that is behind
GPU_UTILIZATION = "ttsfleet_gpu_utilization_ratio"  # 0..1, from NVML
GPU_MEMORY_USED = "ttsfleet_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "ttsfleet_gpu_memory_total_bytes"
READY = "ttsfleet_ready"  # 1 when the engine admits work
KV_CACHE_USED = "ttsfleet_kv_cache_used_bytes"  # KV blocks streams hold
KV_CACHE_TOTAL = "ttsfleet_kv_cache_total_bytes"  # the KV pool
BUILD_INFO = "ttsfleet_build_info"  # 1, labels: version, model, variant, size
STREAM_LEAD_MIN = "ttsfleet_stream_lead_min_seconds"  # least audio ahead of playback
STARTUP_SECONDS = "ttsfleet_startup_seconds"  # label: phase (STARTUP_PHASES)
RESPONSE_CACHE_MEMORY_BYTES = "ttsfleet_response_cache_memory_bytes"  # cached responses held

# Counters (exposed with the _total suffix)
REQUESTS = "ttsfleet_requests_total"  # labels: route, code
ERRORS = "ttsfleet_errors_total"  # label: type (one of the three groups below)
AUDIO_SECONDS = "ttsfleet_audio_seconds_total"  # audio produced
FRAMES = "ttsfleet_frames_total"  # codec frames produced
UNDERRUN_STEPS = "ttsfleet_underrun_steps_total"  # steps with a playing stream out of audio
PREFILL_DEFERRED = "ttsfleet_prefill_deferred_total"  # prefills held back for running streams
ENGINE_BUSY = "ttsfleet_engine_busy_seconds_total"  # label: phase; engine threads' busy time
VOICE_CACHE_LOOKUPS = "ttsfleet_voice_cache_lookups_total"  # label: result (hit, miss)
VOICE_RECORDS_SKIPPED = "ttsfleet_voice_records_skipped_total"  # label: reason
RESPONSE_CACHE_LOOKUPS = "ttsfleet_response_cache_lookups_total"  # labels: level, result
RESPONSE_CACHE_REQUESTS = "ttsfleet_response_cache_requests_total"  # label: result
RESPONSE_CACHE_STORED_BYTES = "ttsfleet_response_cache_stored_bytes_total"  # label: level
RESPONSE_CACHE_EVICTIONS = "ttsfleet_response_cache_evictions_total"  # label: level
RESPONSE_CACHE_CORRUPT = "ttsfleet_response_cache_corrupt_total"  # label: level
RESPONSE_CACHE_ERRORS = "ttsfleet_response_cache_errors_total"  # label: level
BATCH_ITEMS = "ttsfleet_batch_items_total"  # label: outcome (BATCH_OUTCOMES)
BATCH_AUDIO_SECONDS = "ttsfleet_batch_audio_seconds_total"  # audio of completed batch items
BATCH_ITEMS_HELD = "ttsfleet_batch_items_held"  # items the batch worker runs now
BATCH_ITEMS_ALLOWED = "ttsfleet_batch_items_allowed"  # items its pacing allows now
BATCH_OUTCOMES = ("completed", "failed", "released", "lost")
AUTH_KEYS_RELOAD_ERRORS = (
    "ttsfleet_auth_keys_reload_errors_total"  # keys files rejected (server/auth.py)
)

# Histograms (exposed as _bucket, _sum, _count)
TIME_TO_FIRST_AUDIO = "ttsfleet_time_to_first_audio_seconds"  # request received -> first audio byte
REQUEST_DURATION = "ttsfleet_request_duration_seconds"  # request received -> last audio byte
REAL_TIME_FACTOR = "ttsfleet_real_time_factor"  # generation time / audio duration, per request
VOICE_CLONE = "ttsfleet_voice_clone_seconds"  # label: source (upload, request)

# Error types that mean the server failed (not the client, not load).
SERVER_FAULT_ERRORS = ("internal", "cuda_oom", "engine_error")
# Error types the client caused: what it sent, how it sent it, or leaving.
CLIENT_FAULT_ERRORS = (
    "invalid_request",  # a field, or text the engine finds too long to speak
    "invalid_api_key",
    "model_not_found",
    "not_found",
    "method_not_allowed",
    "body_too_large",
    "headers_too_large",
    "request_timeout",  # head or body too slow to arrive
    "rate_limited",  # the key's bucket, or an address's failed authentications
    "too_many_sessions",  # WebSocket sessions per key
    "voice_quota_exceeded",  # a tenant over its voice count or bytes
    "protocol_error",  # WebSocket
    "idle_timeout",  # WebSocket
    "client_disconnect",
    "send_timeout",  # a client that took nothing of its response for --send-timeout
)
# Error types of load and lifecycle: retry later or elsewhere.
CAPACITY_ERRORS = (
    "queue_full",
    "draining",
    "engine_stopped",
    "voice_store_unavailable",
    "insufficient_storage",  # the voice store is full (disk, or Redis' maxmemory)
)

# The phases of a start (engine/startup.py), in order: each lasts from the end of
# the one before. `bench startup` reads these names; its cold starts (an empty compile
# cache: a fleet's first pod) are what the operator's startupProbe budget takes
# (gpu_classes.MEASURED_STARTUP_SECONDS).
STARTUP_PHASES = (
    "import",  # process start -> the engine loads: interpreter, imports, tokenizer, app
    "load_weights",  # talker, codec (Base: voice encoder) weights onto the device, the KV pool
    "compile",  # the Triton kernels, by one eager step of each graph kind
    "capture_decode_graphs",  # the decode step's CUDA graphs captured before ready
    "capture_prefill_graphs",  # the packed prefill's CUDA graphs captured before ready
    "capture_codec_graphs",  # the codec's CUDA graphs captured before ready
    "warm_up",  # one short synthesis through the real path
    "total",  # process start -> ready
    "capture_background",  # after ready: the remaining graphs, captured while idle
)

# TTFA targets are tens to hundreds of ms; tails to seconds under overload.
TTFA_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
RTF_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0)
# Encoding up to 30 s of reference: tens of ms on a GPU, seconds on a CPU.
VOICE_CLONE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def _strip_total(name: str) -> str:
    # prometheus_client appends _total to counters itself.
    return name[: -len("_total")] if name.endswith("_total") else name


class RuntimeMetrics:
    """The collectors of one server process, in their own registry.

    `engine_stats` and `ready` are read at scrape time so the gauges are never
    stale; `gpu` is an optional reader of NVML devices (see `NvmlReader`).
    """

    def __init__(self, engine_stats: Callable[[], object], ready: Callable[[], bool], gpu=None):
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            Gauge,
            Histogram,
            disable_created_metrics,
        )

        # `_created` series double the output and nothing here reads them.
        disable_created_metrics()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            _strip_total(REQUESTS), "Finished API requests", ["route", "code"], registry=r
        )
        self.errors = Counter(
            _strip_total(ERRORS), "Refusals and failures by type", ["type"], registry=r
        )
        self.audio_seconds = Counter(
            _strip_total(AUDIO_SECONDS), "Seconds of audio sent to clients", registry=r
        )
        self.ttfa = Histogram(
            TIME_TO_FIRST_AUDIO,
            "Request received to first audio ready",
            buckets=TTFA_BUCKETS,
            registry=r,
        )
        self.duration = Histogram(
            REQUEST_DURATION, "Request received to last audio", buckets=DURATION_BUCKETS, registry=r
        )
        self.rtf = Histogram(
            REAL_TIME_FACTOR, "Generation time per second of audio", buckets=RTF_BUCKETS, registry=r
        )
        self.voice_clone = Histogram(
            VOICE_CLONE,
            "Cloning one reference recording",
            ["source"],
            buckets=VOICE_CLONE_BUCKETS,
            registry=r,
        )
        self.voice_cache_lookups = Counter(
            _strip_total(VOICE_CACHE_LOOKUPS),
            "Stored voices resolved for speech, by cache result",
            ["result"],
            registry=r,
        )
        self.voice_records_skipped = Counter(
            _strip_total(VOICE_RECORDS_SKIPPED),
            "Stored voice records skipped as unreadable, by reason",
            ["reason"],
            registry=r,
        )
        self.response_cache_lookups = Counter(
            _strip_total(RESPONSE_CACHE_LOOKUPS),
            "Response cache reads by level and result",
            ["level", "result"],
            registry=r,
        )
        self.response_cache_requests = Counter(
            _strip_total(RESPONSE_CACHE_REQUESTS),
            "Speech requests by what the response cache did for them",
            ["result"],
            registry=r,
        )
        self.response_cache_stored_bytes = Counter(
            _strip_total(RESPONSE_CACHE_STORED_BYTES),
            "Bytes of cached responses written, by level",
            ["level"],
            registry=r,
        )
        self.response_cache_memory_bytes = Gauge(
            RESPONSE_CACHE_MEMORY_BYTES, "Bytes of cached responses held in memory", registry=r
        )
        self.response_cache_evictions = Counter(
            _strip_total(RESPONSE_CACHE_EVICTIONS),
            "Cached responses evicted to stay within a bound, by level",
            ["level"],
            registry=r,
        )
        self.response_cache_corrupt = Counter(
            _strip_total(RESPONSE_CACHE_CORRUPT),
            "Stored responses whose length or checksum did not match, by level",
            ["level"],
            registry=r,
        )
        self.response_cache_errors = Counter(
            _strip_total(RESPONSE_CACHE_ERRORS),
            "Response cache calls that failed or timed out, by level",
            ["level"],
            registry=r,
        )
        self.batch_items = Counter(
            _strip_total(BATCH_ITEMS),
            "Batch items this pod's worker finished, by outcome",
            ["outcome"],
            registry=r,
        )
        self.batch_audio_seconds = Counter(
            _strip_total(BATCH_AUDIO_SECONDS),
            "Seconds of audio of the batch items this pod completed",
            registry=r,
        )
        self.batch_items_held = Gauge(
            BATCH_ITEMS_HELD, "Batch items the worker synthesises now", registry=r
        )
        self.batch_items_allowed = Gauge(
            BATCH_ITEMS_ALLOWED, "Batch items the worker's pacing allows now", registry=r
        )
        self.build_info = Gauge(
            BUILD_INFO,
            "Build and model of this runtime",
            ["version", "model", "variant", "size"],
            registry=r,
        )
        r.register(_EngineCollector(engine_stats, ready, gpu))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _EngineCollector:
    """Gauges read from the engine (and NVML) at scrape time."""

    def __init__(self, engine_stats, ready, gpu):
        self._stats = engine_stats
        self._ready = ready
        self._gpu = gpu

    def describe(self):
        return []

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        stats = self._stats()
        yield GaugeMetricFamily(
            QUEUE_DEPTH, "Requests waiting for a batch slot", value=stats.queue_depth
        )
        yield GaugeMetricFamily(ACTIVE_STREAMS, "Requests generating now", value=stats.active)
        yield GaugeMetricFamily(
            PAUSED_STREAMS,
            "Streams paused until their client takes the audio waiting for it",
            value=stats.paused,
        )
        yield GaugeMetricFamily(
            READY, "1 while this pod admits work", value=1 if self._ready() else 0
        )
        yield GaugeMetricFamily(
            KV_CACHE_USED, "KV cache bytes streams hold", value=stats.kv_cache_used_bytes
        )
        yield GaugeMetricFamily(
            KV_CACHE_TOTAL, "KV cache bytes in all", value=stats.kv_cache_total_bytes
        )
        yield CounterMetricFamily(
            _strip_total(FRAMES), "Codec frames generated", value=stats.frames_total
        )
        if stats.min_lead_s is not None:
            yield GaugeMetricFamily(
                STREAM_LEAD_MIN,
                "Smallest lead over playback among playing streams (seconds)",
                value=stats.min_lead_s,
            )
        yield CounterMetricFamily(
            _strip_total(UNDERRUN_STEPS),
            "Engine steps with a playing stream out of audio",
            value=stats.underrun_steps_total,
        )
        yield CounterMetricFamily(
            _strip_total(PREFILL_DEFERRED),
            "Prefills held back to keep running streams ahead of playback",
            value=stats.prefill_deferred_total,
        )
        busy = CounterMetricFamily(
            _strip_total(ENGINE_BUSY),
            "Seconds the engine's threads spent in each phase",
            labels=["phase"],
        )
        for phase, seconds in stats.busy_seconds.items():
            busy.add_metric([phase], seconds)
        yield busy
        startup = GaugeMetricFamily(
            STARTUP_SECONDS, "Seconds each start-up phase took", labels=["phase"]
        )
        for phase, seconds in stats.startup_seconds.items():
            startup.add_metric([phase], seconds)
        yield startup
        readings = self._gpu.read() if self._gpu is not None else []
        if readings:
            util = GaugeMetricFamily(GPU_UTILIZATION, "GPU utilisation 0..1 (NVML)", labels=["gpu"])
            used = GaugeMetricFamily(GPU_MEMORY_USED, "GPU memory used (NVML)", labels=["gpu"])
            total = GaugeMetricFamily(GPU_MEMORY_TOTAL, "GPU memory total (NVML)", labels=["gpu"])
            for index, (utilization, mem_used, mem_total) in enumerate(readings):
                util.add_metric([str(index)], utilization)
                used.add_metric([str(index)], mem_used)
                total.add_metric([str(index)], mem_total)
            yield from (util, used, total)


class NvmlReader:
    """GPU utilisation and memory per device, or nothing where NVML is absent."""

    def __init__(self):
        self._handles = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
        except Exception:  # no package, no driver, no device: export no GPU gauges
            self._handles = []

    def read(self) -> list[tuple[float, int, int]]:
        out = []
        for handle in self._handles:
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(handle)
            except Exception:
                continue
            out.append((util.gpu / 100.0, int(mem.used), int(mem.total)))
        return out
