"""`ttsfleet operator run`: start kopf with our handlers, standalone (no peering CRDs).

With leader election (`--leader-election`, the chart's default for its two replicas) the
process first waits as a follower, serving only /healthz and /metrics, and starts kopf
once it holds the Lease (leadership.py says why this way). Losing the Lease ends the
process at once: a follower is what the restarted pod becomes.
"""

from __future__ import annotations

import asyncio
import http.server
import logging
import os
import sys
import threading
import urllib.parse

import kopf

from ttsfleet_operator import handlers, leadership
from ttsfleet_operator.kube_cluster import load_configuration
from ttsfleet_operator.log_format import configure_logging
from ttsfleet_operator.metrics import OperatorMetrics

log = logging.getLogger(__name__)

# Exit status of a leader that could not renew its Lease in time (not a crash: a step down).
LOST_LEADERSHIP_EXIT = 3


def run(
    namespaces: list[str] | None,
    all_namespaces: bool,
    liveness: str,
    resync_seconds: float,
    kubeconfig: str | None,
    verbose: bool,
    metrics_port: int = 0,
    prometheus_url: str | None = None,
    election: LeaderElectionSettings | None = None,
) -> int:
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    if kubeconfig:
        # kopf's own login reads $KUBECONFIG; our client gets the path directly.
        os.environ["KUBECONFIG"] = kubeconfig
    metrics = OperatorMetrics()
    if metrics_port:
        metrics.serve(metrics_port)
    contender = None
    if election is not None:
        metrics.set_leader(False)
        contender = _Contender(election, kubeconfig, metrics)
        with _FollowerHealth(liveness):
            contender.wait_until_leading()
    else:
        # Alone: this process is the one that acts.
        metrics.set_leader(True)
    registry = kopf.OperatorRegistry()
    handlers.register(
        registry,
        resync_seconds=resync_seconds,
        kubeconfig=kubeconfig,
        metrics=metrics,
        prometheus_url=prometheus_url,
        namespaces=namespaces or None,
    )
    try:
        kopf.run(
            registry=registry,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces or (),
            liveness_endpoint=liveness or None,
        )
    finally:
        if contender is not None:
            contender.step_down()
    return 0


class LeaderElectionSettings:
    """Where the Lease lives and its timing (cli.py's --leader-election-* flags)."""

    def __init__(
        self,
        namespace: str,
        name: str = leadership.DEFAULT_LEASE_NAME,
        identity: str | None = None,
        timing: leadership.LeaseTiming | None = None,
    ):
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.timing = timing or leadership.LeaseTiming()


class _Contender:
    """The election on a thread and event loop of its own, beside kopf's: renewals never
    wait behind reconcile passes, and a leader that cannot renew exits even if kopf's loop
    is busy."""

    def __init__(self, settings: LeaderElectionSettings, kubeconfig: str | None, metrics):
        self._settings = settings
        self._kubeconfig = kubeconfig
        self._metrics = metrics
        self._leading = threading.Event()
        self._failed: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="leader-election", daemon=True)

    def wait_until_leading(self) -> None:
        self._thread.start()
        self._leading.wait()
        if self._failed is not None:
            raise self._failed

    def step_down(self, timeout: float = 5.0) -> None:
        """kopf has stopped (a clean shutdown): give the Lease up for the follower."""
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout)

    def _main(self) -> None:
        try:
            asyncio.run(self._elect())
        except BaseException as exc:  # surfaced on the main thread by wait_until_leading
            self._failed = exc
            self._leading.set()

    async def _elect(self) -> None:
        from kubernetes_asyncio import client

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        configuration = await load_configuration(self._kubeconfig)
        async with client.ApiClient(configuration) as api_client:
            election = leadership.LeaderElection(
                api_client,
                namespace=self._settings.namespace,
                name=self._settings.name,
                identity=self._settings.identity,
                timing=self._settings.timing,
                on_change=self._metrics.set_leader,
            )
            await election.acquire()
            self._leading.set()
            holding = asyncio.create_task(_hold_or_exit(election))
            await self._stop.wait()
            holding.cancel()
            await election.release()


async def _hold_or_exit(election: leadership.LeaderElection) -> None:
    """Renew until lost; a renewal loop that dies of anything unforeseen ends the process
    too: a leader that no longer renews must not go on acting."""
    try:
        await election.hold(on_lost=_exit_lost_leadership)
    except asyncio.CancelledError:
        raise
    except BaseException:
        log.exception("lease renewal stopped unexpectedly", extra={"lease": election.name})
        _exit_lost_leadership()


def _exit_lost_leadership() -> None:
    """Stop acting now, before the Lease can pass to another replica: no clean kopf
    shutdown (its handlers could still write), the process ends."""
    log.error(
        "leadership lost: exiting so that only the new leader acts",
        extra={"exit_code": LOST_LEADERSHIP_EXIT},
    )
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(LOST_LEADERSHIP_EXIT)


class _FollowerHealth:
    """/healthz while waiting as a follower, on kopf's liveness address: a follower is
    healthy, and Ready for the PodDisruptionBudget's count. kopf takes the port over once
    this process leads."""

    def __init__(self, liveness: str):
        self._server: http.server.ThreadingHTTPServer | None = None
        self._url = urllib.parse.urlsplit(liveness) if liveness else None

    def __enter__(self):
        if self._url is None:
            return self
        path = self._url.path or "/"

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                ok = self.path.split("?", 1)[0] == path
                body = b'{"role": "follower"}' if ok else b"not found"
                self.send_response(200 if ok else 404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # probes every few seconds: no log line each
                pass

        self._server = http.server.ThreadingHTTPServer(
            (self._url.hostname or "0.0.0.0", self._url.port or 80), Handler
        )
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
