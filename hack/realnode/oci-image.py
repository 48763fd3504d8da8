#!/usr/bin/env python3
"""Write a one-layer OCI image archive from files on this host, with no registry or builder.

The real node's own images are tiny and made of host files: the pod sandbox (`pause`, built
from the Kubernetes module's pause.c) and the e2e tests' busybox. An OCI image layout in a
tar is what `ctr images import` (hack/cluster.sh load-image) reads, so no image tool is needed.

    oci-image.py --name localhost/ttsfleet/pause:v1.36.3 --out pause.tar \
        --file /path/to/pause:/pause --entrypoint /pause

--file SRC:DEST copies a file into the image; --link DEST:TARGET adds a symlink. The archive
is reproducible: the same inputs give the same bytes (and so the same image digest).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _tar_info(name: str, **fields) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def build_layer(files: list[tuple[Path, str]], links: list[tuple[str, str]]) -> bytes:
    """An uncompressed layer tar: parent directories, the files (mode kept), the symlinks."""
    entries: dict[str, tuple[str, object]] = {}
    for src, dest in files:
        entries[dest.strip("/")] = ("file", src)
    for dest, target in links:
        if dest.strip("/") in entries:
            raise SystemExit(f"oci-image: {dest} given twice (a file and a link, or two links)")
        entries[dest.strip("/")] = ("link", target)
    dirs = {str(p) for name in entries for p in Path(name).parents if str(p) != "."}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in sorted(dirs):
            tar.addfile(_tar_info(d, type=tarfile.DIRTYPE, mode=0o755))
        for name in sorted(entries):
            kind, value = entries[name]
            if kind == "link":
                tar.addfile(_tar_info(name, type=tarfile.SYMTYPE, linkname=str(value), mode=0o777))
            else:
                data = Path(value).read_bytes()
                mode = os.stat(value).st_mode & 0o7777
                tar.addfile(_tar_info(name, size=len(data), mode=mode), io.BytesIO(data))
    return buf.getvalue()


def _descriptor(media_type: str, blob: bytes, **extra) -> dict:
    return {
        "mediaType": media_type,
        "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
        "size": len(blob),
        **extra,
    }


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_archive(
    out: Path,
    name: str,
    layer: bytes,
    entrypoint: list[str],
    cmd: list[str],
    env: list[str],
) -> str:
    """Write the OCI archive; return the manifest digest (what containerd calls the image's)."""
    config = _canonical(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entrypoint, "Cmd": cmd, "Env": env},
            "rootfs": {
                "type": "layers",
                "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()],
            },
        }
    )
    manifest = _canonical(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": _descriptor(OCI_CONFIG, config),
            "layers": [_descriptor(OCI_LAYER, layer)],
        }
    )
    manifest_desc = _descriptor(
        OCI_MANIFEST,
        manifest,
        platform={"architecture": "amd64", "os": "linux"},
        # ctr names the imported image after these (the full reference, not just a tag).
        annotations={
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name,
        },
    )
    index = _canonical({"schemaVersion": 2, "manifests": [manifest_desc]})
    members = [
        ("oci-layout", _canonical({"imageLayoutVersion": "1.0.0"})),
        ("index.json", index),
    ]
    for blob in (config, manifest, layer):
        members.append(("blobs/sha256/" + hashlib.sha256(blob).hexdigest(), blob))
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written next to the target and renamed: a reader never sees half an archive.
    with (
        tempfile.NamedTemporaryFile(dir=out.parent, prefix=out.name, delete=False) as tmp,
        tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_tar_info(d, type=tarfile.DIRTYPE, mode=0o755))
        for member, data in members:
            tar.addfile(_tar_info(member, size=len(data), mode=0o644), io.BytesIO(data))
    os.replace(tmp.name, out)
    return manifest_desc["digest"]


def _pair(text: str) -> tuple[str, str]:
    left, sep, right = text.partition(":")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"expected A:B, got {text!r}")
    return left, right


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True, help="image reference, e.g. localhost/x/y:tag")
    parser.add_argument("--out", required=True, type=Path, help="archive to write")
    parser.add_argument("--file", action="append", default=[], type=_pair, metavar="SRC:DEST")
    parser.add_argument("--link", action="append", default=[], type=_pair, metavar="DEST:TARGET")
    parser.add_argument("--entrypoint", nargs="*", default=[])
    parser.add_argument("--cmd", nargs="*", default=[])
    parser.add_argument(
        "--env",
        action="append",
        default=None,
        help="KEY=value (default PATH=/bin:/usr/bin)",
    )
    args = parser.parse_args()
    files = [(Path(src), dest) for src, dest in args.file]
    layer = build_layer(files, args.link)
    env = args.env if args.env is not None else ["PATH=/bin:/usr/bin"]
    digest = write_archive(args.out, args.name, layer, args.entrypoint, args.cmd, env)
    print(digest)


if __name__ == "__main__":
    main()
