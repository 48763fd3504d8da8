"""Fills of a model cache volume from a stand-in hub (support/fake_hub.py) over real HTTP,
one repository whose commit and files each test picks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from support.fake_hub import FakeHub, FakeRepo
from ttsfleet_runtime.checkpoint.fetch import HuggingFaceHub, fill
from ttsfleet_runtime.model_cache import Marker

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"


@pytest.fixture
def fill_from() -> Callable[..., tuple[Marker, list[str]]]:
    """`fill_from(root, files, commit=..., corrupt=..., full_check=...)`: fill `root` with
    REPO at `main` from a hub that serves `files` (and `corrupt` in place of some);
    -> (the marker, the files it downloaded)."""

    def run(
        root: Path,
        files: dict[str, bytes],
        *,
        commit: str = "a" * 40,
        corrupt: dict[str, bytes] | None = None,
        full_check: bool = False,
    ) -> tuple[Marker, list[str]]:
        repo = FakeRepo(files=dict(files), commit=commit, corrupt=dict(corrupt or {}))
        with FakeHub({REPO: repo}) as hub:
            marker = fill(
                root, REPO, "main", HuggingFaceHub(endpoint=hub.endpoint), full_check=full_check
            )
            downloaded = [
                r.split("/resolve/")[1]
                for r in hub.requests
                if r.startswith("GET") and "/resolve/" in r
            ]
            return marker, [path.split("/", 1)[1] for path in downloaded]

    return run


@pytest.fixture
def fetch_command() -> Callable[..., subprocess.CompletedProcess]:
    """`fetch_command(out, endpoint, *args, token=None)`: `ttsfleet-runtime fetch ARGS --out
    OUT` in its own process, as the fill Job runs it, against the hub at `endpoint`."""

    def run(out: Path, endpoint: str, *args: str, token: str | None = None):
        environ = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        environ.update(HF_ENDPOINT=endpoint, HF_HOME=str(out.parent / "hf-home"))
        if token:
            environ["HF_TOKEN"] = token
        return subprocess.run(
            [sys.executable, "-m", "ttsfleet_runtime", "fetch", *args, "--out", str(out)],
            env=environ,
            capture_output=True,
            text=True,
            timeout=120,
        )

    return run
