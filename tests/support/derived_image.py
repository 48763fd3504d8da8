"""An image derived from one of the project's images by one small layer, with no builder.

A canary test needs a candidate image that differs from stable. Rebuilding the 6 GB runtime
image for that, exporting and importing it again would cost the suite many minutes; the
derived image shares every layer with its base, so its OCI archive holds only what is new
(the layer, the config, the manifest). `ctr images import` takes it because the node's
containerd already holds the base's layers (import the base first).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _blob_name(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/")


def _layer(files: dict[str, bytes]) -> bytes:
    """An uncompressed layer tar holding `files` (absolute paths), world-readable."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs = sorted({str(p) for path in files for p in Path(path).parents if str(p) != "/"})
        for directory in dirs:
            info = tarfile.TarInfo(directory.lstrip("/"))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _read_base(archive: Path) -> tuple[dict, dict, dict]:
    """The base archive's one manifest descriptor, its manifest and its config."""
    with tarfile.open(archive) as tar:
        # Only the small files: the layers are skipped over, never read.
        members = {m.name.removeprefix("./"): m for m in tar.getmembers()}

        def read(name: str) -> dict:
            return json.load(tar.extractfile(members[name]))

        (descriptor,) = read("index.json")["manifests"]
        manifest = read(_blob_name(descriptor["digest"]))
        config = read(_blob_name(manifest["config"]["digest"]))
    return descriptor, manifest, config


def derive_image(
    base_archive: Path, repository: str, files: dict[str, bytes], env: dict[str, str], out_dir: Path
) -> tuple[str, Path]:
    """(reference, archive) of the base image plus a layer with `files` and `env` set (a
    variable the base sets is replaced). The tag is a hash of the base and the changes, so
    the same inputs give the same image and the archive is written once."""
    descriptor, manifest, config = _read_base(base_archive)
    layer_tar = _layer(files)
    # mtime 0: the same files give the same compressed bytes, hence the same digests.
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.loads(json.dumps(config))
    settings = config.setdefault("config", {})
    kept = [e for e in settings.get("Env", []) if e.split("=", 1)[0] not in env]
    settings["Env"] = kept + [f"{key}={value}" for key, value in env.items()]
    config["rootfs"]["diff_ids"].append(_digest(layer_tar))
    config.setdefault("history", []).append({"created_by": "tests/support/derived_image.py"})
    config_blob = json.dumps(config, sort_keys=True).encode()
    manifest = {
        **manifest,
        "config": {**manifest["config"], "digest": _digest(config_blob), "size": len(config_blob)},
        "layers": [
            *manifest["layers"],
            {"mediaType": LAYER_MEDIA_TYPE, "digest": _digest(layer), "size": len(layer)},
        ],
    }
    manifest.pop("annotations", None)
    manifest_blob = json.dumps(manifest, sort_keys=True).encode()
    tag = hashlib.sha256(descriptor["digest"].encode() + manifest_blob).hexdigest()[:12]
    reference = f"{repository}:{tag}"
    archive = out_dir / f"{repository.rsplit('/', 1)[-1]}-{tag}.tar"
    if archive.exists():
        return reference, archive
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": descriptor["mediaType"],
                "digest": _digest(manifest_blob),
                "size": len(manifest_blob),
                "annotations": {REF_NAME: reference, CONTAINERD_NAME: reference},
            }
        ],
    }
    entries = {
        "oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
        "index.json": json.dumps(index).encode(),
        _blob_name(_digest(manifest_blob)): manifest_blob,
        _blob_name(_digest(config_blob)): config_blob,
        _blob_name(_digest(layer)): layer,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, "w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    partial.replace(archive)
    return reference, archive
