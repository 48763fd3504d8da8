"""The operator's layers are import-linter contracts (pyproject.toml), which read import
statements. A module reached by a name in a string (importlib, __import__, runpy) passes
every contract unseen: the operator's CLI once reached the runtime's that way. Other
packages add commands through entry points (operator/cli.py), so no such call is needed."""

from __future__ import annotations

import ast
from pathlib import Path

OPERATOR = Path(__file__).resolve().parents[2] / "operator" / "ttsfleet_operator"

# Calls that import a module named at run time.
HIDDEN = {"import_module", "__import__", "spec_from_file_location", "run_module", "run_path"}


def hidden_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name in HIDDEN:
                found.append(f"{path.name}:{node.lineno} {name}()")
    return found


def test_the_operator_imports_no_module_by_a_name_in_a_string():
    found = [hit for path in sorted(OPERATOR.rglob("*.py")) for hit in hidden_imports(path)]
    assert found == []


def test_the_check_sees_the_calls_it_forbids(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import importlib\nfrom importlib import import_module\n"
        "importlib.import_module('ttsfleet_runtime.cli')\nimport_module('x')\n__import__('y')\n"
    )
    assert hidden_imports(sample) == [
        "sample.py:3 import_module()",
        "sample.py:4 import_module()",
        "sample.py:5 __import__()",
    ]
