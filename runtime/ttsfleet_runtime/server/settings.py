"""The server's settings: `ServerSettings`, declared in the runtime's settings
catalogue (`ttsfleet_runtime.settings`), which the CLI and the operator read too."""

from __future__ import annotations

from ..settings import ServerSettings

__all__ = ["ServerSettings"]
