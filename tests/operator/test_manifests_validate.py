"""Every manifest `ttsfleet render` prints for every sample passes
`kubernetes-validate --strict` for each Kubernetes version we support."""

import pathlib

import kubernetes_validate
import pytest
import yaml

from ttsfleet_operator.cli import main

SAMPLES = sorted((pathlib.Path(__file__).resolve().parents[2] / "samples").glob("*.yaml"))
# The newest three releases kubernetes-validate knows; the e2e cluster runs 1.36.
KUBERNETES_VERSIONS = ["1.35", "1.36", "1.37"]


def test_there_is_a_sample_per_variant_plus_spot_and_canary():
    documents = [yaml.safe_load(p.read_text()) for p in SAMPLES]
    assert {d["spec"]["model"]["variant"] for d in documents} == {
        "Base",
        "CustomVoice",
        "VoiceDesign",
    }
    assert any(d["spec"].get("spot", {}).get("ratio", 0) > 0 for d in documents)
    assert any("canary" in d["spec"] for d in documents)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("replicas", [None, 7])
def test_rendered_sample_is_valid_kubernetes(sample, replicas, capsys):
    argv = ["render", "-f", str(sample)] + (
        [] if replicas is None else ["--replicas", str(replicas)]
    )
    assert main(argv) == 0
    manifests = [m for m in yaml.safe_load_all(capsys.readouterr().out) if m]
    assert len(manifests) >= 4
    for manifest in manifests:
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(manifest, version, strict=True)
