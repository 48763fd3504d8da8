"""hack/images/inputs.py: which files a build context sends (Docker's .dockerignore
rules), and which cached images a buildah store no longer needs."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("image_inputs", ROOT / "hack/images/inputs.py")
inputs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(inputs)


def tree(root: Path, files: list[str], dockerignore: str) -> Path:
    for rel in files:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / ".dockerignore").write_text(dockerignore)
    return root


def test_the_projects_context_is_the_code_and_packaging_only(tmp_path):
    files = [
        "pyproject.toml",
        "README.md",
        "runtime/ttsfleet_runtime/cli.py",
        "runtime/ttsfleet_runtime/__pycache__/cli.cpython-311.pyc",
        "runtime/ttsfleet.egg-info/PKG-INFO",
        "operator/ttsfleet_operator/server/playground/index.html",
        "e2e/test_cluster.py",
        ".git/HEAD",
        "docs/README.md",
    ]
    tree(tmp_path, files, (ROOT / ".dockerignore").read_text())
    assert inputs.context_files(tmp_path) == [
        "README.md",
        "operator/ttsfleet_operator/server/playground/index.html",
        "pyproject.toml",
        "runtime/ttsfleet_runtime/cli.py",
    ]


@pytest.mark.parametrize(
    ("dockerignore", "kept"),
    [
        ("", ["a/b/c.txt", "a/d.log", "top.log"]),
        ("*.log", ["a/b/c.txt", "a/d.log"]),  # `*` stays in one path element
        ("**/*.log", ["a/b/c.txt"]),
        ("a\n!a/b", ["a/b/c.txt", "top.log"]),  # the last matching rule decides
        ("!a/b\na", ["top.log"]),
        ("a/?.log", ["a/b/c.txt", "top.log"]),
    ],
)
def test_dockerignore_rules_as_docker_reads_them(tmp_path, dockerignore, kept):
    tree(tmp_path, ["a/b/c.txt", "a/d.log", "top.log"], dockerignore)
    assert [f for f in inputs.context_files(tmp_path) if f != ".dockerignore"] == kept


def test_copied_sources_skip_stage_copies():
    dockerfile = (
        "FROM x AS a\nCOPY pyproject.toml README.md ./\n"
        "COPY --chown=1 runtime/ runtime/\nCOPY --from=a /w /w\n"
    )
    assert inputs.copied_sources(dockerfile) == ["pyproject.toml", "README.md", "runtime"]


def store(tmp_path: Path, layers: dict[str, str | None], images: list[dict]) -> Path:
    (tmp_path / "overlay-layers").mkdir()
    (tmp_path / "overlay-images").mkdir()
    (tmp_path / "overlay-layers/layers.json").write_text(
        json.dumps([{"id": layer, "parent": parent} for layer, parent in layers.items()])
    )
    (tmp_path / "overlay-images/images.json").write_text(json.dumps(images))
    return tmp_path


def test_stale_images_are_the_unnamed_ones_no_named_image_is_built_on(tmp_path):
    # base <- deps <- code (the current image); base <- old-deps <- old-code (an old hash).
    layers = {
        "base": None,
        "deps": "base",
        "code": "deps",
        "old-deps": "base",
        "old-code": "old-deps",
    }
    images = [
        {"id": "base-image", "names": ["localhost/ttsfleet/base-python:1"], "layer": "base"},
        {"id": "current", "names": ["localhost/ttsfleet/runtime:2"], "layer": "code"},
        {"id": "deps-step", "layer": "deps"},
        {"id": "old-deps-step", "layer": "old-deps"},
        {"id": "old-code-step", "names": [], "layer": "old-code"},
    ]
    assert inputs.stale_images(store(tmp_path, layers, images), "overlay") == [
        "old-deps-step",
        "old-code-step",
    ]
