"""The restricted Pod Security profile every pod the operator renders runs under: the
runtime's and the model cache fill's (non-root as the image's user, read-only root, no
capabilities, the runtime's default seccomp profile)."""

from __future__ import annotations

# The runtime image's user (Dockerfile.runtime: USER 65532); explicit so runAsNonRoot is verifiable.
RUNTIME_UID = 65532


def pod_security_context() -> dict:
    # fsGroup: volumes (the model cache the fill writes) belong to the image's user.
    return {
        "runAsNonRoot": True,
        "runAsUser": RUNTIME_UID,
        "runAsGroup": RUNTIME_UID,
        "fsGroup": RUNTIME_UID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> dict:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
