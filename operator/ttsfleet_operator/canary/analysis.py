"""One interval's canary analysis: three PromQL queries against the thresholds.

The queries read the runtime's own series with the labels the chart's
PodMonitor gives them (`namespace`, `service`, `track`, `pool`): only the
canary track, over the analysis interval.

- requests: API requests the canary finished (probes and /metrics excluded);
  fewer than `minRequests` makes the interval Inconclusive, not healthy;
- error ratio: server-fault errors (`internal`, `cuda_oom`, `engine_error`)
  over those requests; client errors (bad input, 429s) are not the candidate's fault;
- TTFA p95: from the time-to-first-audio histogram.

A Prometheus that cannot answer makes the interval Inconclusive as well: the
candidate showed nothing wrong, and repeated silence pauses the rollout.
"""

from __future__ import annotations

from ttsfleet_operator import labels
from ttsfleet_operator.canary.prometheus import Prometheus, PrometheusError
from ttsfleet_operator.canary.state_machine import FAIL, INCONCLUSIVE, PASS
from ttsfleet_operator.tts_service import AnalysisResult, CanaryAnalysis
from ttsfleet_runtime import metrics as runtime_metrics

SERVER_FAULT_TYPES = runtime_metrics.SERVER_FAULT_ERRORS
API_ROUTES = "/v1/.*"


def _selector(namespace: str, service: str, track: str, extra: str = "") -> str:
    parts = [f'namespace="{namespace}"', f'service="{service}"', f'track="{track}"']
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}"


def queries(
    namespace: str, service: str, interval_seconds: int, track: str = labels.CANARY
) -> dict[str, str]:
    """The PromQL of one analysis, by name."""
    window = f"[{interval_seconds}s]"
    requests = runtime_metrics.REQUESTS + _selector(
        namespace, service, track, f'route=~"{API_ROUTES}"'
    )
    errors = runtime_metrics.ERRORS + _selector(
        namespace, service, track, f'type=~"{"|".join(SERVER_FAULT_TYPES)}"'
    )
    ttfa = runtime_metrics.TIME_TO_FIRST_AUDIO + "_bucket" + _selector(namespace, service, track)
    return {
        "requests": f"sum(increase({requests}{window}))",
        # Absent error series (no error of those types yet) count as 0 errors.
        "error_ratio": f"(sum(increase({errors}{window})) or vector(0)) / sum(increase({requests}{window}))",
        "ttfa_p95": f"histogram_quantile(0.95, sum by (le) (rate({ttfa}{window})))",
    }


def judge(
    rules: CanaryAnalysis, requests: float | None, error_ratio: float | None, ttfa_p95: float | None
) -> AnalysisResult:
    """Pass, Fail or Inconclusive from the three numbers (None: no data)."""
    if requests is None or requests < rules.min_requests:
        seen = 0 if requests is None else round(requests)
        return AnalysisResult(
            result=INCONCLUSIVE,
            reason=f"{seen} requests on the canary, {rules.min_requests} needed",
        )
    problems = []
    if error_ratio is not None and error_ratio > rules.max_error_ratio:
        problems.append(f"error ratio {error_ratio:.3f} > {rules.max_error_ratio:g}")
    if ttfa_p95 is not None and ttfa_p95 * 1000 > rules.ttfa_p95_milliseconds:
        problems.append(f"TTFA p95 {ttfa_p95 * 1000:.0f} ms > {rules.ttfa_p95_milliseconds} ms")
    numbers = (
        f"{round(requests)} requests, error ratio "
        + ("n/a" if error_ratio is None else f"{error_ratio:.3f}")
        + ", TTFA p95 "
        + ("n/a" if ttfa_p95 is None else f"{ttfa_p95 * 1000:.0f} ms")
    )
    if problems:
        return AnalysisResult(result=FAIL, reason="; ".join(problems) + f" ({numbers})")
    if ttfa_p95 is None:
        return AnalysisResult(result=INCONCLUSIVE, reason=f"no TTFA observations ({numbers})")
    return AnalysisResult(result=PASS, reason=numbers)


async def analyse(
    prometheus: Prometheus | None, namespace: str, service: str, rules: CanaryAnalysis
) -> AnalysisResult:
    if prometheus is None:
        return AnalysisResult(
            result=INCONCLUSIVE, reason="no Prometheus configured (--prometheus-url)"
        )
    values: dict[str, float | None] = {}
    try:
        for name, expr in queries(namespace, service, rules.interval_seconds).items():
            result = await prometheus.query(expr)
            values[name] = result[0][1] if result else None
    except PrometheusError as error:
        return AnalysisResult(
            result=INCONCLUSIVE, reason=f"Prometheus query failed: {error}"[:1000]
        )
    return judge(rules, values["requests"], values["error_ratio"], values["ttfa_p95"])
