"""Test helpers have one home, tests/support (imported as `support.<module>`): no test
folder is put on sys.path, and no test imports a conftest or another test module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_files():
    for folder in ("tests", "e2e", "bench"):
        yield from (ROOT / folder).rglob("*.py")


def test_nothing_puts_a_folder_on_sys_path():
    offenders = [
        str(path.relative_to(ROOT))
        for path in python_files()
        if path != Path(__file__) and "sys.path.insert" in path.read_text()
    ]
    assert offenders == []


def test_tests_import_helpers_from_support_only():
    local = {p.stem for p in python_files() if p.parent.name != "support"}
    offenders = []
    for path in python_files():
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [
                f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in local
            ]
    assert offenders == []
