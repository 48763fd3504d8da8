"""`make dev-down` stops the operator `make dev` (hack/dev.sh) started, and nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from support.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]


def dev_down(cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "dev-down", f"TTSFLEET_CACHE={cache}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def start(cache: Path, argv0: str) -> int:
    """A stand-in running in the background as hack/dev.sh leaves the operator (not our
    child), its command line `argv0 60`, its pid in dev.sh's pid file."""
    pid = int(
        subprocess.run(
            ["bash", "-c", f'(exec -a "{argv0}" sleep 60) >/dev/null 2>&1 & echo $!'],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    (cache / "dev").mkdir(parents=True, exist_ok=True)
    (cache / "dev" / "operator.pid").write_text(f"{pid}\n")
    wait_for(
        lambda: argv0 in Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " "),
        10,
        what="the stand-in operator to start",
    )
    return pid


def stop(pid: int) -> None:
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_dev_down_stops_the_dev_operator(tmp_path):
    operator = start(tmp_path, "/venv/bin/ttsfleet operator run --all-namespaces")
    try:
        result = dev_down(tmp_path)
        assert result.returncode == 0, result.stderr
        assert not alive(operator)
        assert not (tmp_path / "dev" / "operator.pid").exists()
    finally:
        stop(operator)


def test_dev_down_leaves_a_process_that_reused_the_pid_alone(tmp_path):
    stranger = start(tmp_path, "some-other-program")
    try:
        result = dev_down(tmp_path)
        assert result.returncode == 0, result.stderr
        assert "no dev operator running" in result.stdout
        assert alive(stranger)
    finally:
        stop(stranger)


def test_dev_down_without_a_dev_operator_says_so(tmp_path):
    result = dev_down(tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no dev operator running" in result.stdout
