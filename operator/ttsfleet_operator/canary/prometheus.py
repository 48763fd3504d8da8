"""A small Prometheus HTTP API client: instant queries, nothing else.

The standard library only (the operator image stays small); the blocking call
runs in a thread so the operator's event loop keeps going.
"""

from __future__ import annotations

import asyncio
import json
import math
import urllib.error
import urllib.parse
import urllib.request

DEFAULT_TIMEOUT_SECONDS = 10.0


class PrometheusError(Exception):
    """The query could not be answered (unreachable, refused, or a PromQL error)."""


class Prometheus:
    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_SECONDS):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def query_sync(self, expr: str) -> list[tuple[dict, float]]:
        """Instant vector or scalar result as (labels, value) pairs; NaN values are dropped."""
        data = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=data, method="POST")
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            try:
                detail = json.load(error).get("error", "")
            except ValueError:
                detail = ""
            raise PrometheusError(f"HTTP {error.code} {detail}".strip()) from error
        except (urllib.error.URLError, OSError, ValueError) as error:
            raise PrometheusError(f"{self.url}: {error}") from error
        if body.get("status") != "success":
            raise PrometheusError(body.get("error", "query failed"))
        result = body["data"]
        if result["resultType"] == "scalar":
            pairs = [({}, float(result["result"][1]))]
        elif result["resultType"] == "vector":
            pairs = [(item["metric"], float(item["value"][1])) for item in result["result"]]
        else:
            raise PrometheusError(f"expected an instant vector, got {result['resultType']}")
        return [(metric, value) for metric, value in pairs if not math.isnan(value)]

    async def query(self, expr: str) -> list[tuple[dict, float]]:
        return await asyncio.to_thread(self.query_sync, expr)
