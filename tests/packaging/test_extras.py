"""Installing the operator must not pull in torch or CUDA: the operator image and
`pip install ttsfleet[operator]` stay small."""

import subprocess
import sys
import tomllib
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
