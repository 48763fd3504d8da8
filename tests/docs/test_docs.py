"""The documentation a person reads first: generated pages match their source,
links lead somewhere, and the quick start names the commands CI runs."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted(ROOT.glob("*/**/README.md")),
]


def test_field_docs_are_the_crd_schema():
    generated = subprocess.run(
        [sys.executable, "-m", "ttsfleet_operator.cli", "crd", "--fields"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    ).stdout
    assert "| `model.size` (required)" in generated
    page = (ROOT / "docs" / "fields.md").read_text()
    assert page.endswith(generated), "docs/fields.md is stale: run `make generate`"


def test_relative_links_resolve():
    broken = []
    for page in PAGES:
        # Code is not prose: `[a-z]([-a-z]*)` in a pattern is no link.
        text = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL))
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_quick_start_runs_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert "make dev" in readme and "make test" in readme
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_readme_puts_the_commands_on_the_path_before_it_uses_them():
    lines = (ROOT / "README.md").read_text().splitlines()
    on_path = next(
        i for i, line in enumerate(lines) if "export PATH=~/.cache/ttsfleet/venv/bin" in line
    )
    first_use = next(i for i, line in enumerate(lines) if re.match(r"ttsfleet(-runtime)? ", line))
    assert on_path < first_use, (
        f"README line {first_use + 1} runs ttsfleet before line {on_path + 1} puts it on PATH"
    )
