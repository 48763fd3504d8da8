"""support/derived_image.py: an image that is its base plus one layer, as an OCI archive
holding only the new blobs. What containerd checks on import and unpack is pinned here: the
config's diff_ids name the uncompressed layers in order, the descriptors' digests and sizes
match the blobs, and the index names the image."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile

from support.derived_image import _layer, derive_image


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def write_archive(path, blobs: dict[str, bytes], index: dict) -> None:
    with tarfile.open(path, "w") as tar:
        entries = {"index.json": json.dumps(index).encode(), "oci-layout": b"{}"}
        entries |= {f"blobs/sha256/{d.split(':')[1]}": data for d, data in blobs.items()}
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def read_archive(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def base_archive(tmp_path):
    layer_tar = _layer({"/app/run.py": b"print('hi')\n"})
    layer = gzip.compress(layer_tar, mtime=0)
    config = json.dumps(
        {
            "config": {"Env": ["PATH=/usr/bin", "PYTHONPATH=/old"]},
            "rootfs": {"type": "layers", "diff_ids": [sha(layer_tar)]},
        }
    ).encode()
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": sha(manifest),
                "size": len(manifest),
            }
        ],
    }
    path = tmp_path / "base.tar"
    write_archive(path, {sha(layer): layer, sha(config): config, sha(manifest): manifest}, index)
    return path, sha(layer)


def test_the_derived_archive_adds_one_layer_and_the_env_and_holds_only_new_blobs(tmp_path):
    base, base_layer = base_archive(tmp_path)
    reference, archive = derive_image(
        base,
        "localhost/x/late",
        {"/opt/fault/sitecustomize.py": b"# late\n"},
        {"PYTHONPATH": "/opt/fault"},
        tmp_path / "out",
    )
    files = read_archive(archive)
    blob = lambda digest: files[f"blobs/sha256/{digest.split(':')[1]}"]  # noqa: E731
    (entry,) = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["org.opencontainers.image.ref.name"] == reference
    assert reference.startswith("localhost/x/late:")
    manifest = json.loads(blob(entry["digest"]))
    assert sha(blob(entry["digest"])) == entry["digest"]
    old, new = manifest["layers"]
    assert old["digest"] == base_layer
    # The base's layer is not in the archive: containerd already holds it.
    assert f"blobs/sha256/{base_layer.split(':')[1]}" not in files
    layer = blob(new["digest"])
    assert (sha(layer), len(layer)) == (new["digest"], new["size"])
    config = json.loads(blob(manifest["config"]["digest"]))
    assert config["rootfs"]["diff_ids"][-1] == sha(gzip.decompress(layer))
    assert len(config["rootfs"]["diff_ids"]) == 2
    assert config["config"]["Env"] == ["PATH=/usr/bin", "PYTHONPATH=/opt/fault"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(layer))) as tar:
        member = tar.getmember("opt/fault/sitecustomize.py")
        assert tar.extractfile(member).read() == b"# late\n"
        assert member.mode == 0o644


def test_the_same_inputs_give_the_same_reference(tmp_path):
    base, _ = base_archive(tmp_path)
    args = ("localhost/x/late", {"/f.py": b"1"}, {"A": "1"})
    first, _ = derive_image(base, *args, tmp_path / "a")
    second, _ = derive_image(base, *args, tmp_path / "b")
    other, _ = derive_image(base, "localhost/x/late", {"/f.py": b"2"}, {"A": "1"}, tmp_path / "c")
    assert first == second != other
