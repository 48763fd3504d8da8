"""The API server's own ceiling: the writes a new TTSService costs, without the operator.

    TTSFLEET_CLUSTER_NAME=bench TTSFLEET_REAL_NODE=0 PYTHONPATH=operator:runtime \
        python3 bench/apiserver_ceiling.py --services 300

For each of N services it sends what the operator's first pass sends (the API keys
Secret, a server-side apply of each rendered child, one Event), from `--concurrency`
services at once over the operator's own API client (`KubeCluster`), on the running
local cluster. The children are the bench's (bench/operator_scale.py), owned by nothing,
so the controller-manager and kwok react to them as they do in the operator benchmark.
Requests per second here, against the operator benchmark's, says what share of the
bulk's time is the operator's and what the API server's on this machine. The namespace
is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from operator_scale import CLUSTER_SH, kubectl, progress, service_manifest  # noqa: E402


async def run(kubeconfig: str, namespace: str, services: int, concurrency: int) -> dict:
    from ttsfleet_operator import drift
    from ttsfleet_operator.canary.plan import plan
    from ttsfleet_operator.kube_cluster import KubeCluster
    from ttsfleet_operator.render import api_keys, render_fleet
    from ttsfleet_operator.tts_service import TTSService

    counts: dict[str, int] = {}

    def count(verb: str, resource: str) -> None:
        counts[f"{verb} {resource}"] = counts.get(f"{verb} {resource}", 0) + 1

    cluster = await KubeCluster.connect(kubeconfig, count)
    # The Event's subject: the namespace (the services here are not objects).
    subject = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "namespace": namespace, "uid": ""},
    }
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(services):
        queue.put_nowait(i)

    async def first_pass_writes(i: int) -> None:
        manifest = service_manifest(f"raw-{i:04d}", namespace)
        service = TTSService.model_validate(
            {**manifest, "metadata": {**manifest["metadata"], "uid": f"raw-{i}"}}
        )
        await cluster.create(api_keys.render_api_keys_secret(service, api_keys.new_api_key()))
        for child in render_fleet(service, plan(service, None)):
            await cluster.apply(drift.with_rendered_hash(child))
        await cluster.emit_event(subject, "Normal", "Created", f"raw service {i}")

    async def worker() -> None:
        while not queue.empty():
            await first_pass_writes(queue.get_nowait())

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    await cluster.close()
    total = sum(counts.values())
    return {
        "services": services,
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "requests": counts,
        "requests_per_service": round(total / services, 2),
        "requests_per_second": round(total / elapsed, 1),
        "load_average": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--services", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=16, help="the operator's 16 passes")
    parser.add_argument("--namespace", default="bench-apiserver")
    args = parser.parse_args(argv)
    kubeconfig = subprocess.run(
        [str(CLUSTER_SH), "kubeconfig"], check=True, capture_output=True, text=True
    ).stdout.strip()
    ns = args.namespace
    kubectl("kubectl", kubeconfig, "delete", "namespace", ns, "--ignore-not-found", "--wait=true")
    kubectl("kubectl", kubeconfig, "create", "namespace", ns)
    progress(f"{args.services} services' first-pass writes, {args.concurrency} at once")
    try:
        result = asyncio.run(run(kubeconfig, ns, args.services, args.concurrency))
    finally:
        kubectl("kubectl", kubeconfig, "delete", "namespace", ns, "--wait=false")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
