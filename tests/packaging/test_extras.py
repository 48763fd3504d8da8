"""Installing the operator must not pull in torch or CUDA: the operator image and
`pip install ttsfleet[operator]` stay small."""

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "triton", "nvidia-", "cuda-")


def canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def closure(requirements: list[str]) -> set[str]:
    """Names of every installed distribution the requirements reach, transitively."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = canonical(req.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # not installed here: an optional platform dependency
        for sub in dist.requires or []:
            r = Requirement(sub)
            wanted = [""] + sorted(req.extras)
            if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in wanted):
                todo.append(r)
    return seen


def test_operator_extra_pulls_no_torch_or_cuda():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = closure(project["dependencies"] + project["optional-dependencies"]["operator"])
    assert "kopf" in names  # the walk did reach the operator's dependencies
    heavy = sorted(n for n in names if n.startswith(HEAVY))
    assert heavy == []


def test_operator_code_imports_without_torch():
    """Every operator module imports with torch made unimportable."""
    probe = """
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'triton', 'numpy'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import ttsfleet_operator
mods = [m.name for m in pkgutil.walk_packages(ttsfleet_operator.__path__, 'ttsfleet_operator.')]
for m in mods:
    importlib.import_module(m)
import ttsfleet_runtime.metrics
print(len(mods))
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 0


def test_the_operator_cli_starts_with_only_the_operator_extra_installed():
    """The operator image runs `ttsfleet operator run`, whose CLI builds every parser at
    start, the runtime's commands included: none may import what only the runtime's
    extras install (httpx, fastapi, torch...). Found by the operator pod on the real node."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    allowed = closure(project["dependencies"] + project["optional-dependencies"]["operator"])
    allowed.add("ttsfleet")
    absent = sorted(
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(canonical(d) in allowed for d in dists)
    )
    assert "httpx" in absent and "kopf" not in absent  # the split did reach both sides
    probe = f"""
import sys
ABSENT = set({absent!r})
class Absent:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ABSENT:
            raise ImportError('not in the operator image: ' + name)
sys.meta_path.insert(0, Absent())
from ttsfleet_operator.cli import build_parser
args = build_parser().parse_args(["operator", "run", "--all-namespaces"])
print(args.command)
"""
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd="/")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "operator"


def test_the_runtime_installs_and_serves_without_the_operator(tmp_path):
    """As Dockerfile.runtime builds it: pyproject.toml, README.md and runtime/ only."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "runtime", source / "runtime", ignore=shutil.ignore_patterns("__pycache__")
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            ".",
        ],
        cwd=source,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("ttsfleet-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packages = {
            name.split("/")[0] for name in archive.namelist() if not name.startswith("ttsfleet-")
        }
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert packages == {"ttsfleet_runtime"}
    assert "ttsfleet-runtime = ttsfleet_runtime.cli:main" in scripts

    # `python -m ttsfleet_runtime` runs with the operator unimportable (the wheel's code,
    # not this checkout's).
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    probe = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'ttsfleet_operator':
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
import runpy, ttsfleet_runtime
assert ttsfleet_runtime.__file__.startswith(sys.argv[1]), ttsfleet_runtime.__file__
sys.argv = ['ttsfleet-runtime', 'serve', '--help']
runpy.run_module('ttsfleet_runtime', run_name='__main__')  # python -m ttsfleet_runtime serve --help
"""
    result = subprocess.run(
        [sys.executable, "-c", probe, str(target)],
        capture_output=True,
        text=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": str(target)},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "[TTSFLEET_MAX_BATCH]" in result.stdout
