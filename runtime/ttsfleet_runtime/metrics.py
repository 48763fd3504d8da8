"""The runtime's Prometheus metric catalogue: the one place that names them.

The HPA (through prometheus-adapter), the canary analysis and the dashboards
read these names, so they are a public contract: rename only with a migration.
This module imports nothing heavy; the operator imports it for the names.
"""

PREFIX = "ttsfleet_"

# Gauges
QUEUE_DEPTH = "ttsfleet_queue_depth"  # requests admitted, waiting for a batch slot
ACTIVE_STREAMS = "ttsfleet_active_streams"  # requests generating now
GPU_UTILIZATION = "ttsfleet_gpu_utilization_ratio"  # 0..1, from NVML
GPU_MEMORY_USED = "ttsfleet_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL = "ttsfleet_gpu_memory_total_bytes"
READY = "ttsfleet_ready"  # 1 when the engine admits work
BUILD_INFO = "ttsfleet_build_info"  # 1, labels: version, model, variant, size

# Counters (exposed with the _total suffix)
REQUESTS = "ttsfleet_requests_total"  # labels: route, code
ERRORS = "ttsfleet_errors_total"  # labels: type (invalid_request, queue_full, cuda_oom, internal, client_disconnect, ...)
AUDIO_SECONDS = "ttsfleet_audio_seconds_total"  # audio produced
FRAMES = "ttsfleet_frames_total"  # codec frames produced

# Histograms (exposed as _bucket, _sum, _count)
TIME_TO_FIRST_AUDIO = "ttsfleet_time_to_first_audio_seconds"  # request received -> first audio byte
REQUEST_DURATION = "ttsfleet_request_duration_seconds"  # request received -> last audio byte
REAL_TIME_FACTOR = "ttsfleet_real_time_factor"  # generation time / audio duration, per request

# The label every runtime pod carries and Prometheus keeps as `track`
# (stable|canary): the canary analysis compares the two by it.
