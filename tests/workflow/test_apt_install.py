"""hack/apt.sh: `make test` runs the builds that install Debian packages side by side, and
dpkg serves one apt-get at a time. The real apt-get cannot run in a test (it would change
this machine), so a stand-in on PATH records what it is asked and fails, as dpkg does,
when a second caller arrives while the first is still installing."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

FAKE_APT_GET = r"""#!/bin/bash
# A stand-in for apt-get: one caller at a time, like dpkg's lock; 'install' fails until
# 'update' has run once, like a machine whose package lists were removed.
state=$FAKE_APT_STATE
echo "$*" >> "$state/calls"
if ! mkdir "$state/held" 2>/dev/null; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2
  exit 100
fi
trap 'rmdir "$state/held"' EXIT
case " $* " in
  *" update "*) touch "$state/lists" ;;
  *" install "*) [[ -f $state/lists ]] || { echo "E: Unable to locate package" >&2; exit 100; } ;;
esac
sleep 0.3
"""


def _install(tmp_path: Path, state: Path, prefix: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["bash", "-c", f'source "{ROOT}/hack/apt.sh" && apt_install {prefix} sox redis-server'],
        env={
            "PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "TTSFLEET_CACHE": str(tmp_path / "cache"),
            "FAKE_APT_STATE": str(state),
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_concurrent_installs_take_turns_and_refresh_missing_lists(tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "apt-get"
    fake.write_text(FAKE_APT_GET)
    fake.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()

    installs = [_install(tmp_path, state, f"build{i}") for i in range(3)]
    results = [(p.wait(timeout=60), p.stderr.read()) for p in installs]

    for code, stderr in results:
        assert code == 0, stderr
        assert "Could not get lock" not in stderr
    calls = (state / "calls").read_text().splitlines()
    assert all("--no-install-recommends sox redis-server" in c for c in calls if "install" in c)
    # The first install found no package lists and refreshed them; the others did not need to.
    assert sum(" update" in c for c in calls) == 1
    assert sum(" install " in c for c in calls) == 4


def test_a_failed_install_names_the_packages(tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "apt-get"
    fake.write_text("#!/bin/sh\nexit 100\n")
    fake.chmod(0o755)
    proc = _install(tmp_path, tmp_path, "tools")
    assert proc.wait(timeout=60) != 0
    assert "error: [tools] apt-get install sox redis-server failed" in proc.stderr.read()
