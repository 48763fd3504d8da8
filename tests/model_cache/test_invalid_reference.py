"""A repository id or revision the hub could not hold is refused before anything is
asked of the hub or written to the volume: one sentence, and the exit code the fill
Job's podFailurePolicy fails at once on (a retry would only fail again)."""

from __future__ import annotations

import pytest

from support.fake_hub import FakeHub, FakeRepo
from ttsfleet_runtime.model_cache import FAILURE_BY_CODE, PERMANENT_FAILURES

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-Base"
INVALID_REFERENCE = next(f for f in PERMANENT_FAILURES if f.reason == "InvalidReference")


@pytest.fixture
def fetch(tmp_path, fetch_command):
    """`fetch(*args)` against a hub serving REPO; -> (the command's result, hub requests)."""

    def run(*args: str):
        with FakeHub({REPO: FakeRepo(files={"config.json": b"{}"})}) as hub:
            return fetch_command(tmp_path / "v", hub.endpoint, *args), hub.requests

    return run


@pytest.mark.parametrize(
    "repo", ["../../etc", "owner/../../x", "owner/name/extra", "/abs/path", "owner/na me", "x--y"]
)
def test_an_invalid_repository_id_is_refused_in_a_sentence_with_the_permanent_code(
    tmp_path, fetch, repo
):
    done, requests = fetch(repo)
    assert done.returncode == INVALID_REFERENCE.exit_code
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"fetch failed: InvalidReference: {repo!r} is not a hub repository id: give "
        "owner/name, e.g. Qwen/Qwen3-TTS-12Hz-0.6B-Base"
    )
    assert requests == []
    assert not (tmp_path / "v").exists()


@pytest.mark.parametrize("revision", ["../main", "main/../../x", "a b", "v1..2"])
def test_an_invalid_revision_is_refused_the_same_way(fetch, revision):
    done, requests = fetch(REPO, "--revision", revision)
    assert done.returncode == INVALID_REFERENCE.exit_code
    assert f"{revision!r} is not a hub revision" in done.stderr
    assert "Traceback" not in done.stderr
    assert requests == []


def test_every_permanent_failure_has_its_own_code():
    assert len(FAILURE_BY_CODE) == len(PERMANENT_FAILURES)
    # 0 is success, 1 Python's own failure (worth a retry), 2 argparse's usage error.
    assert all(code > 2 for code in FAILURE_BY_CODE)
