"""The benchmarks are a top layer of the runtime that reaches it only through public
names: nothing else in the runtime imports them (the CLI runs them), and they import no
private module or name and touch no private attribute of what they measure. The engine
can change its insides without a benchmark noticing, or a benchmark breaking it.
(import-linter's layers contract says the first part for the packages it names; this
test holds for every module, whatever the layers become.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "runtime" / "ttsfleet_runtime"
BENCH = PACKAGE / "bench"


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imported_modules(path: Path) -> list[str]:
    """Absolute names of the modules `path` imports (relative imports resolved)."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = parts[:-1]  # what a relative import of level 1 names
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def test_nothing_in_the_runtime_imports_the_benchmarks_but_the_cli():
    importers = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        if BENCH not in path.parents
        and path.name != "cli.py"
        and any(
            name == "ttsfleet_runtime.bench" or name.startswith("ttsfleet_runtime.bench.")
            for name in imported_modules(path)
        )
    ]
    assert importers == []


def test_the_benchmarks_use_public_names_only():
    used = []
    for path in sorted(BENCH.rglob("*.py")):
        for name in imported_modules(path):
            if any(private(part) for part in name.split(".")):
                used.append(f"{path.name}: import {name}")
        for node in ast.walk(ast.parse(path.read_text())):
            own = isinstance(node, ast.Attribute) and (
                isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            )
            if isinstance(node, ast.Attribute) and private(node.attr) and not own:
                used.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert used == []
