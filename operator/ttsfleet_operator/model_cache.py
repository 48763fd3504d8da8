"""Where the model cache stands, and which cache the pods mount.

Pure: the reconciler hands in the live claims and fill Jobs and the last status, and
gets the `ModelCacheStatus` to render from and to report. The rules:

- The phase of the cache the spec asks for comes from its claim and its Job: Pending
  (no claim or Job yet, the claim not bound, the fill pod not running), Downloading
  (the fill pod runs), Ready (the Job completed), Failed (the Job failed; the reason is
  the fill's exit code, see `ttsfleet_runtime.model_cache`, or the Job's own reason).
- The pods mount the serving cache. It becomes the asked-for cache once that one is
  Ready, and only then: the pods of a new revision start on a filled volume, and those
  of the old one keep serving meanwhile. Before any cache was Ready there is none, and
  no runtime Deployment is rendered.
- The serving cache is kept while another fills (`kept`); once the pods moved, it is no
  longer rendered and the pass deletes it. Kubernetes' PVC protection holds the claim
  until the last pod mounting it is gone, so the old pods finish on their volume.
- A claim deleted by hand is held by PVC protection while any scheduled pod mounts it,
  the fill's finished pod included: its Job is deleted, so the claim goes once no
  runtime pod mounts it either; then it is created and filled again. A Job created
  before its claim filled an earlier claim of that name: it proves nothing about this
  one and is replaced. A Job that has not completed is replaced when its
  rendering changes (a Job's pod template is immutable); a completed one stands.
"""

from __future__ import annotations

import re

from ttsfleet_operator import drift, labels
from ttsfleet_operator.render.model_cache import HOLDS_ANNOTATION, cache_claim_name
from ttsfleet_operator.render.model_source import uses_cache
from ttsfleet_operator.tts_service import ModelCacheStatus, TTSService
from ttsfleet_runtime.model_cache import FAILURE_BY_CODE

CLAIM = "PersistentVolumeClaim"
JOB = "Job"

PENDING = "Pending"
DOWNLOADING = "Downloading"
READY = "Ready"
FAILED = "Failed"

# The job controller's message when a podFailurePolicy rule fails the Job:
# "Container fetch for pod NS/NAME failed with exit code 4 matching FailJob rule at index 1"
_EXIT_CODE = re.compile(r"exit code ([0-9]+)")


def _condition(job: dict, type_: str) -> dict | None:
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") == type_ and condition.get("status") == "True":
            return condition
    return None


def filled_an_earlier_claim(job: dict, claim: dict | None) -> bool:
    """The Job was created before this claim: it filled a claim of the same name deleted since."""
    if claim is None:
        return False
    job_created = job["metadata"].get("creationTimestamp") or ""
    claim_created = claim["metadata"].get("creationTimestamp") or ""
    return bool(job_created and claim_created) and job_created < claim_created


def _failure(job: dict, condition: dict) -> tuple[str, str]:
    message = condition.get("message") or ""
    code = _EXIT_CODE.search(message) if condition.get("reason") == "PodFailurePolicy" else None
    failure = FAILURE_BY_CODE.get(int(code.group(1))) if code else None
    if failure is not None:
        return failure.reason, f"fill Job {job['metadata']['name']}: {failure.message}"
    return condition.get("reason") or "FillFailed", f"fill Job {job['metadata']['name']}: {message}"


def phase_of(claim: dict | None, job: dict | None) -> tuple[str, str, str]:
    """(phase, reason, message) of one cache from its live claim and Job."""
    if claim is None:
        return PENDING, "ClaimCreating", "the cache's PersistentVolumeClaim is being created"
    name = claim["metadata"]["name"]
    if claim["metadata"].get("deletionTimestamp"):
        return (
            PENDING,
            "ClaimDeleting",
            f"PersistentVolumeClaim {name} is being deleted (pods still mount it); it is"
            " created and filled again once it is gone",
        )
    if job is None or filled_an_earlier_claim(job, claim):
        return PENDING, "FillCreating", f"the fill Job {name} is being created"
    failed = _condition(job, "Failed")
    if failed is not None:
        reason, message = _failure(job, failed)
        return FAILED, reason, message
    if _condition(job, "Complete") is not None:
        holds = (claim["metadata"].get("annotations") or {}).get(HOLDS_ANNOTATION, "")
        return READY, "Filled", f"PersistentVolumeClaim {name} holds {holds}, verified"
    claim_phase = (claim.get("status") or {}).get("phase") or PENDING
    if claim_phase != "Bound":
        return (
            PENDING,
            "ClaimPending",
            f"PersistentVolumeClaim {name} is {claim_phase}: no volume is bound to it yet"
            " (a WaitForFirstConsumer class binds once the fill pod is scheduled)",
        )
    if ((job.get("status") or {}).get("ready") or 0) > 0:
        return DOWNLOADING, "Downloading", f"the fill Job {name} is downloading and verifying"
    return PENDING, "FillPending", f"the fill Job {name}'s pod is waiting to start"


def observe(
    service: TTSService, previous: ModelCacheStatus | None, live: dict[tuple[str, str], dict]
) -> ModelCacheStatus | None:
    """The cache's status for this pass; None without model.cache."""
    if not uses_cache(service):
        return None
    wanted = cache_claim_name(service)
    phase, reason, message = phase_of(live.get((CLAIM, wanted)), live.get((JOB, wanted)))
    serving = previous.serving_claim_name if previous is not None else None
    if phase == READY:
        serving = wanted
    elif serving != wanted and (CLAIM, serving) not in live:
        # The serving cache is gone (deleted while no pod mounted it): nothing to serve from.
        serving = None
    return ModelCacheStatus(
        claim_name=wanted,
        phase=phase,
        reason=reason,
        message=message,
        serving_claim_name=serving,
    )


def kept(cache: ModelCacheStatus | None) -> set[tuple[str, str]]:
    """Live children not rendered that must stay: the serving cache while another fills."""
    if cache is None or cache.serving_claim_name in (None, cache.claim_name):
        return set()
    return {(CLAIM, cache.serving_claim_name), (JOB, cache.serving_claim_name)}


def job_action(desired: dict, job: dict | None, claim: dict | None) -> str:
    """What to do with a fill Job: "apply" (create it), "keep", "replace" (delete, create),
    or "delete": its claim is being deleted, and the fill's finished pod, which mounts
    it, would hold it (PVC protection counts every scheduled pod) until the Job goes."""
    if claim is not None and claim["metadata"].get("deletionTimestamp"):
        return "delete" if job is not None else "keep"
    if job is None:
        return "apply"
    if filled_an_earlier_claim(job, claim):
        return "replace"
    if _condition(job, "Complete") is not None:
        return "keep"
    live_hash = (job["metadata"].get("annotations") or {}).get(labels.RENDERED_HASH)
    return "keep" if live_hash == drift.rendered_hash(desired) else "replace"
