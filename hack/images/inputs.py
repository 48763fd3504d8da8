"""What hack/images.sh cannot say well in bash: the content hash of an image's inputs
(the build context exactly as .dockerignore admits it), and which images in a buildah
store are no longer any current image's cache.

    inputs.py hash CONTEXT DOCKERFILE [KEY=VALUE ...]   prints the sha256 of every input
    inputs.py files CONTEXT                             prints the files the context sends
    inputs.py stale STORE DRIVER                        prints ids of dead cache images

Standard library only: it runs before any virtual environment exists."""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    # Docker's rules (filepath.Match plus `**`): `*` and `?` stay inside one path
    # element, `**` spans any number of them.
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


class DockerIgnore:
    """The rules of one .dockerignore: the last pattern that matches a path, or one of
    its parent folders, decides; `!` turns a pattern into an exception."""

    def __init__(self, text: str):
        self.rules: list[tuple[bool, str, re.Pattern[str]]] = []
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            keep = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
            self.rules.append((keep, pattern, _pattern_regex(pattern)))

    def excluded(self, path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        excluded = False
        for keep, _, regex in self.rules:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                excluded = not keep
        return excluded

    def may_keep_below(self, folder: str) -> bool:
        """Whether an exception could admit something inside an excluded folder."""
        return any(
            keep and (pattern.startswith(folder + "/") or "*" in pattern.split("/")[0])
            for keep, pattern, _ in self.rules
        )


def context_files(context: Path) -> list[str]:
    ignore_file = context / ".dockerignore"
    ignore = DockerIgnore(ignore_file.read_text() if ignore_file.exists() else "")
    files = []
    for folder, subfolders, names in os.walk(context):
        rel_folder = os.path.relpath(folder, context)
        rel_folder = "" if rel_folder == "." else rel_folder + "/"
        kept_folders = []
        for name in sorted(subfolders):
            rel = rel_folder + name
            if not ignore.excluded(rel) or ignore.may_keep_below(rel):
                kept_folders.append(name)
        subfolders[:] = kept_folders
        for name in sorted(names):
            rel = rel_folder + name
            if not ignore.excluded(rel):
                files.append(rel)
    return sorted(files)


def copied_sources(dockerfile_text: str) -> list[str]:
    """The context paths a Dockerfile's COPY and ADD lines read (not those --from a stage)."""
    sources = []
    for line in dockerfile_text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [word for word in words[1:] if not word.startswith("--")]
        if any(word.startswith("--from") for word in words[1:]):
            continue
        sources += [os.path.normpath(source).strip("/") for source in args[:-1]]
    return sources


def input_hash(context: Path, dockerfile: Path, settings: list[str]) -> str:
    """The hash of what a build reads: the Dockerfile, the settings it is built with, and
    the context files its COPY lines take, as .dockerignore admits them (a change to
    operator/ leaves the runtime image as it is)."""
    digest = hashlib.sha256()
    text = dockerfile.read_text()
    sources = copied_sources(text)

    def add(label: str, data: bytes) -> None:
        # Length-prefixed, so moving bytes from one input to the next changes the hash.
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("dockerfile", text.encode())
    for setting in sorted(settings):
        add("setting", setting.encode())
    for rel in context_files(context):
        if not any(rel == source or rel.startswith(source + "/") for source in sources):
            continue
        path = context / rel
        # The mode matters too: an executable bit lands in the image.
        add(f"file {rel} {os.stat(path).st_mode & 0o777:o}", path.read_bytes())
    return digest.hexdigest()


def stale_images(store: Path, driver: str) -> list[str]:
    """Images that no named image is built on: the layer cache of inputs that are gone.

    A multi-stage build's intermediate images stay useful only while they lie under a
    named image (the chain of its layers); the rest are what old hashes left behind."""
    images = json.loads((store / f"{driver}-images" / "images.json").read_text() or "[]")
    layers = json.loads((store / f"{driver}-layers" / "layers.json").read_text() or "[]")
    parent = {layer["id"]: layer.get("parent") for layer in layers}
    live: set[str] = set()
    for image in images:
        if image.get("names"):
            layer = image.get("layer")
            while layer and layer not in live:
                live.add(layer)
                layer = parent.get(layer)
    return [
        image["id"] for image in images if not image.get("names") and image.get("layer") not in live
    ]


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "hash":
        context, dockerfile, *settings = args
        print(input_hash(Path(context), Path(dockerfile), settings))
    elif command == "files":
        print("\n".join(context_files(Path(args[0]))))
    elif command == "stale":
        print("\n".join(stale_images(Path(args[0]), args[1])))
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
