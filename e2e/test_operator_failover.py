"""Two operator processes with leader election; the leader is killed (SIGKILL) in the middle
of a canary and the follower carries the rollout on, each step once.

Both run as the chart's ServiceAccount (the chart's Lease RBAC is what lets them elect).
No Prometheus: every analysis interval is inconclusive, which still walks the canary's
state machine one interval at a time (inconclusive 1, 2, 3, ... each with its Event and a
new lastAnalysis time), so a pass that analysed twice, or two replicas both acting, shows
as a count that skips or an interval analysed twice.

Failover time is measured two ways and kept in `failover.json` in the test's tmp dir
(docs/operator-ha.md quotes it): SIGKILL -> the Lease names the other process, and
SIGKILL -> the other process applied a change made right after the kill (a second
TTSService's spec.replicas shows in its status.observedGeneration).

And the other half of the safety argument: a leader whose renewals are refused exits
before its Lease can pass to anyone.
"""

from __future__ import annotations

import datetime
import json
import signal
import time

import pytest

from support.operator_fixtures import (
    SYSTEM_NAMESPACE,
    Operator,
    install_chart,
    load_sample,
    tts,
    wait_ready,
)
from ttsfleet_operator import leadership, operator_main
from ttsfleet_operator.canary import state_machine as sm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

INTERVAL = 10  # the schema's shortest analysis interval
LEASE = leadership.DEFAULT_LEASE_NAME
ELECTION_ARGS = ("--leader-election", "--leader-election-namespace", SYSTEM_NAMESPACE)


def lease(cluster) -> dict:
    """The Lease's spec; {} before anyone created it."""
    proc = cluster.kubectl("get", "lease", LEASE, "-n", SYSTEM_NAMESPACE, "-o", "json", check=False)
    return json.loads(proc.stdout)["spec"] if proc.returncode == 0 else {}


def lease_holder(cluster) -> str:
    return lease(cluster).get("holderIdentity") or ""


def identity(op: Operator) -> str | None:
    """The identity this process elected with, from its 'waiting for leadership' log line."""
    for line in op.log_path.read_text(errors="replace").splitlines():
        if '"waiting for leadership"' in line:
            return json.loads(line)["identity"]
    return None


def acted(op: Operator) -> bool:
    """Whether the process started kopf and its handlers (handlers.py logs it once)."""
    return '"operator started"' in op.log_path.read_text(errors="replace")


def canary_event_reasons(cluster, name: str, namespace: str) -> list[str]:
    items = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={name}"
    )["items"]
    return [e["reason"] for e in items if e["reason"].startswith("Canary")]


def test_killing_the_leader_mid_canary_hands_over_without_a_double_step(
    cluster, operator_install, operator, namespace, tmp_path
):
    # The session's operator runs without election: it would act beside the two.
    operator.stop()
    replicas = [
        Operator(operator_install.kubeconfig, tmp_path / f"operator-{i}.log") for i in (0, 1)
    ]
    try:
        for op in replicas:
            op.start(namespaces=[namespace], extra_args=ELECTION_ARGS)
        _kill_leader_mid_canary(cluster, namespace, replicas, tmp_path)
    finally:
        for op in replicas:
            if op.running:
                op.proc.send_signal(signal.SIGTERM)  # a follower exits at once
            op.stop()
        operator.start()


def _kill_leader_mid_canary(cluster, namespace, replicas, tmp_path):
    ids = cluster.wait_for(
        lambda: all(identity(op) for op in replicas) and [identity(op) for op in replicas],
        timeout=60,
        what="both processes contending for the Lease",
    )
    holder = cluster.wait_for(
        lambda: lease_holder(cluster) in ids and lease_holder(cluster),
        timeout=60,
        what=f"one of {ids} to hold the Lease",
    )
    leader, follower = (
        (replicas[0], replicas[1]) if holder == ids[0] else (replicas[1], replicas[0])
    )

    probe = load_sample("customvoice-1.7b.yaml")
    probe["metadata"]["name"] = "failover-probe"
    probe["spec"]["replicas"] = 1
    cluster.apply(probe, "-n", namespace)
    wait_ready(cluster, "failover-probe", namespace, timeout=120)

    manifest = load_sample("canary.yaml")
    name = manifest["metadata"]["name"]
    manifest["spec"]["canary"]["analysis"].update(
        intervalSeconds=INTERVAL, steps=2, inconclusiveLimit=20
    )
    cluster.apply(manifest, "-n", namespace)

    history: list[dict] = []  # each distinct status.canary, in order

    def canary_at(inconclusive: int):
        canary = (tts(cluster, name, namespace).get("status") or {}).get("canary") or {}
        if canary and (not history or history[-1] != canary):
            history.append(canary)
        assert canary.get("phase") in (None, sm.IDLE, sm.PROGRESSING), canary
        return canary.get("inconclusive", 0) >= inconclusive and canary

    cluster.wait_for(
        lambda: canary_at(1), timeout=INTERVAL + 60, interval=0.3, what="the first analysis"
    )
    assert not acted(follower), "the follower ran handlers while the leader held the Lease"

    # Mid-canary: SIGKILL the leader, and at once ask for a change only a leader makes.
    leader.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    cluster.kubectl(
        "patch", "tts", "failover-probe", "-n", namespace, "--type=merge",
        "-p", '{"spec": {"replicas": 2}}',
    )  # fmt: skip
    generation = tts(cluster, "failover-probe", namespace)["metadata"]["generation"]
    taken = cluster.wait_for(
        lambda: lease_holder(cluster) == identity(follower) and time.monotonic(),
        timeout=60,
        interval=0.2,
        what="the follower to take the Lease",
    )
    applied = cluster.wait_for(
        lambda: (
            (tts(cluster, "failover-probe", namespace).get("status") or {}).get(
                "observedGeneration"
            )
            == generation
            and time.monotonic()
        ),
        timeout=60,
        interval=0.2,
        what="the new leader to reconcile the change made after the kill",
    )
    measured = {
        "lease_taken_seconds": round(taken - killed, 2),
        "change_applied_seconds": round(applied - killed, 2),
        "lease_timing": vars(leadership.LeaseTiming()),
    }
    (tmp_path / "failover.json").write_text(json.dumps(measured, indent=1))
    print(f"failover: {json.dumps(measured)} ({tmp_path / 'failover.json'})")

    # The follower carries the rollout on: two more intervals, analysed by it alone.
    target = history[-1].get("inconclusive", 0) + 2
    final = cluster.wait_for(
        lambda: canary_at(target),
        timeout=3 * INTERVAL + 60,
        interval=0.3,
        what="two more analyses by the new leader",
    )
    leader.stop()

    # Each interval analysed once: the count rises one at a time, each with its own
    # analysis time, a whole interval after the one before (two writers, or a pass that
    # analysed again after the takeover, would show two within one interval).
    analysed = [c for c in history if c.get("lastAnalysis")]
    counts = [c["inconclusive"] for c in analysed]
    assert counts == list(range(1, final["inconclusive"] + 1)), history
    times = [sm.parse_time(c["lastAnalysis"]["time"]) for c in analysed]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:], strict=False)]
    assert all(gap >= INTERVAL - 1 for gap in gaps), (gaps, history)
    assert {c["step"] for c in history} == {1} and {c["revision"] for c in history} == {
        history[0]["revision"]
    }, history

    # ... and told once each: one CanaryStarted, one Event per analysed interval.
    reasons = cluster.wait_for(
        lambda: (
            (r := canary_event_reasons(cluster, name, namespace)).count(
                "CanaryAnalysisInconclusive"
            )
            >= final["inconclusive"]
            and r
        ),
        timeout=10,
        what="an Event per analysed interval",
    )
    assert reasons.count("CanaryStarted") == 1, reasons
    assert reasons.count("CanaryAnalysisInconclusive") == final["inconclusive"], reasons
    assert acted(follower)


def test_a_leader_that_cannot_renew_exits_before_its_lease_can_pass(
    cluster, operator_install, operator, namespace
):
    """Renewals refused (here: the chart's Lease RoleBinding removed, as a network cut
    would look from the API server's side): the leader stops acting by exiting, and does
    so while its Lease still holds, so no follower could have taken over first."""
    operator.stop()
    leader = Operator(operator_install.kubeconfig, operator.log_path.parent / "renew-cut.log")
    try:
        leader.start(namespaces=[namespace], extra_args=ELECTION_ARGS)
        cluster.wait_for(
            lambda: identity(leader) and lease_holder(cluster) == identity(leader),
            timeout=60,
            what="the operator to hold the Lease",
        )
        cluster.kubectl("delete", "rolebinding", "ttsfleet-leader-election", "-n", SYSTEM_NAMESPACE)
        code = cluster.wait_for(
            lambda: leader.proc.poll() is not None and (leader.proc.returncode, time.time()),
            timeout=60,
            interval=0.1,
            what="the leader to exit once it cannot renew",
        )
        exit_code, exited_at = code
        assert exit_code == operator_main.LOST_LEADERSHIP_EXIT, leader.log_tail()
        assert '"leadership lost' in leader.log_path.read_text()
        # Its last renewal that went through (the Lease still names it), plus the duration a
        # follower waits, is still ahead when it has gone.
        spec = lease(cluster)
        assert spec["holderIdentity"] == identity(leader)
        renewed = datetime.datetime.fromisoformat(spec["renewTime"].replace("Z", "+00:00"))
        expires = renewed.timestamp() + spec["leaseDurationSeconds"]
        assert exited_at < expires, (exited_at, spec)
    finally:
        leader.stop()
        install_chart(cluster)  # the RoleBinding back
        operator.start()
