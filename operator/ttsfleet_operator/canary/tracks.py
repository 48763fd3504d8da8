"""What each track serves: the stable spec, the candidate, and which of them stable runs.

The user's spec is never rewritten (a GitOps tool owns it), so a promotion lives
in the status: while `status.canary` says the current candidate was promoted,
the stable track serves the candidate. Moving the candidate into
`runtime.image` / `model.revision` later changes nothing that runs.
"""

from __future__ import annotations

from ttsfleet_operator.canary import state_machine
from ttsfleet_operator.render.revision import revision
from ttsfleet_operator.tts_service import CanaryStatus, TTSService


def base_service(service: TTSService) -> TTSService:
    """The spec's stable track: the spec without its canary section."""
    return service.model_copy(update={"spec": service.spec.model_copy(update={"canary": None})})


def candidate_service(service: TTSService) -> TTSService | None:
    """The spec with the candidate's image and model revision in place, or None without a candidate."""
    canary = service.spec.canary
    if canary is None:
        return None
    spec = service.spec
    runtime = spec.runtime.model_copy(
        update={"image": canary.candidate.image or spec.runtime.image}
    )
    model = spec.model.model_copy(
        update={"revision": canary.candidate.model_revision or spec.model.revision}
    )
    return service.model_copy(
        update={
            "spec": spec.model_copy(update={"canary": None, "runtime": runtime, "model": model})
        }
    )


def candidate_revision(service: TTSService) -> str | None:
    """Revision of the candidate when a canary is asked for (`percent` > 0), else None."""
    candidate = candidate_service(service)
    if candidate is None or service.spec.canary.percent == 0:
        return None
    return revision(candidate)


def stable_service(service: TTSService, canary: CanaryStatus | None) -> TTSService:
    """What the stable track runs: the candidate once it was promoted, else the spec's stable."""
    if (
        canary is not None
        and canary.phase in state_machine.PROMOTED_PHASES
        and canary.revision is not None
        and canary.revision == candidate_revision(service)
    ):
        return candidate_service(service)
    return base_service(service)
