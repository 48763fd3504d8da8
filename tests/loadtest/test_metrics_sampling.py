"""What the load test keeps of the server's /metrics: gauges summed over GPUs, the build
labels, per phase the max and mean of the readings taken inside it, and the share of
wall time the engine was busy in each of its own phases."""

from __future__ import annotations

from ttsfleet_runtime.loadtest.streams import MetricsSampler, parse_metrics

TEXT = """\
# TYPE ttsfleet_queue_depth gauge
ttsfleet_queue_depth 3.0
# TYPE ttsfleet_active_streams gauge
ttsfleet_active_streams 64.0
# TYPE ttsfleet_gpu_memory_used_bytes gauge
ttsfleet_gpu_memory_used_bytes{gpu="0"} 1.0e+10
ttsfleet_gpu_memory_used_bytes{gpu="1"} 2.0e+10
# TYPE ttsfleet_build_info gauge
ttsfleet_build_info{model="m",size="1.7B",variant="CustomVoice",version="0.1.0"} 1.0
# TYPE ttsfleet_requests counter
ttsfleet_requests_total{code="200",route="/v1/audio/speech"} 5.0
# TYPE ttsfleet_engine_busy_seconds counter
ttsfleet_engine_busy_seconds_total{phase="decode"} 12.5
ttsfleet_engine_busy_seconds_total{phase="codec"} 3.0
"""


def test_gauges_sum_over_gpus_and_build_labels_are_kept():
    values, build = parse_metrics(TEXT)
    assert values == {
        "ttsfleet_queue_depth": 3.0,
        "ttsfleet_active_streams": 64.0,
        "ttsfleet_gpu_memory_used_bytes": 3.0e10,
        "ttsfleet_engine_busy_seconds_total": {"decode": 12.5, "codec": 3.0},
    }
    assert build == {"model": "m", "size": "1.7B", "variant": "CustomVoice", "version": "0.1.0"}


def test_a_phase_keeps_max_and_mean_of_its_own_readings():
    sampler = MetricsSampler(client=None, url=None, interval_s=1.0)
    sampler.readings = [
        (0.5, {"ttsfleet_queue_depth": 100.0}),  # before the phase
        (1.0, {"ttsfleet_queue_depth": 1.0, "ttsfleet_active_streams": 8.0}),
        (2.0, {"ttsfleet_queue_depth": 4.0, "ttsfleet_active_streams": 16.0}),
        (3.0, {"ttsfleet_queue_depth": 2.0}),
    ]
    peaks = sampler.peaks(1.0, 3.0)
    assert peaks["scrapes"] == 3
    assert (peaks["queue_depth_max"], peaks["queue_depth_mean"]) == (4.0, 2.333)
    assert (peaks["active_streams_max"], peaks["active_streams_mean"]) == (16.0, 12.0)
    assert peaks["gpu_memory_used_bytes_max"] is None  # no NVML on that server
    assert peaks["engine_busy_share"] is None  # that server does not expose it
    assert sampler.peaks(5.0, 6.0)["scrapes"] == 0


def test_busy_shares_are_the_rate_of_the_busy_counters_over_the_phase():
    busy = "ttsfleet_engine_busy_seconds_total"
    sampler = MetricsSampler(client=None, url=None, interval_s=1.0)
    sampler.readings = [
        (0.0, {busy: {"decode": 0.0, "codec": 0.0}}),  # before the phase
        (10.0, {busy: {"decode": 1.0, "codec": 0.5, "plan": 0.0}}),
        (12.0, {busy: {"decode": 2.5, "codec": 0.7, "plan": 0.1}}),  # plan appears late
        (14.0, {busy: {"decode": 4.0, "codec": 0.9, "plan": 0.2}}),
    ]
    shares = sampler.peaks(10.0, 14.0)["engine_busy_share"]
    assert shares == {"decode": 0.75, "codec": 0.1, "plan": 0.05}
    assert sampler.peaks(10.0, 11.0)["engine_busy_share"] is None  # one reading
