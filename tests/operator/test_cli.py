"""The `ttsfleet` command line: render, crd, and the operator's arguments."""

import pathlib
import subprocess
import sys

import pytest
import yaml

from ttsfleet_operator import crd
from ttsfleet_operator.cli import build_parser, main

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_crd_prints_the_generated_crd(capsys):
    assert main(["crd"]) == 0
    assert capsys.readouterr().out == crd.to_yaml()


def test_render_replicas_shows_the_split(capsys):
    assert main(["render", "-f", str(REPO / "samples" / "spot.yaml"), "--replicas", "10"]) == 0
    deployments = {
        m["metadata"]["name"]: m["spec"]["replicas"]
        for m in yaml.safe_load_all(capsys.readouterr().out)
        if m and m["kind"] == "Deployment"
    }
    assert deployments == {"tts-spot-on-demand": 3, "tts-spot-spot": 7}


def test_render_refuses_an_invalid_service_with_the_rule_message(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: ttsfleet.io/v1alpha1\nkind: TTSService\nmetadata: {name: bad}\n"
        "spec: {model: {size: 0.6B, variant: VoiceDesign}}\n"
    )
    assert main(["render", "-f", str(bad)]) == 1
    assert "VoiceDesign is only released at size 1.7B" in capsys.readouterr().err


def test_operator_run_arguments():
    args = build_parser().parse_args(
        ["operator", "run", "-n", "a", "-n", "b", "--resync-seconds", "5"]
    )
    assert args.namespace == ["a", "b"] and args.resync_seconds == 5.0 and not args.all_namespaces
    args = build_parser().parse_args(["operator", "run", "--all-namespaces", "--kubeconfig", "/k"])
    assert args.all_namespaces and args.kubeconfig == "/k" and args.namespace is None


def test_the_cli_starts_without_torch():
    # The operator image has no torch: the CLI (with the runtime's subcommands
    # registered) must not import it.
    code = "import sys; from ttsfleet_operator.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_field_docs_list_every_spec_field_and_every_rule_message(capsys):
    assert main(["crd", "--fields"]) == 0
    text = capsys.readouterr().out
    for field in (
        "model.variant",
        "gpu.class",
        "spot.minOnDemand",
        "autoscaling.targetGPUUtilization",
        "canary.analysis.ttfaP95Milliseconds",
        "engine.cudaGraphs",
        "runtime.image",
    ):
        assert f"| `{field}`" in text
    for message in rule_messages(crd.build()):
        assert message in text


def rule_messages(node):
    if isinstance(node, dict):
        for entry in node.get("x-kubernetes-validations", []):
            yield entry["message"]
        for value in node.values():
            yield from rule_messages(value)
    elif isinstance(node, list):
        for value in node:
            yield from rule_messages(value)


# The 414-byte "billion laughs" of issue 10: nine levels of nine aliases, 9**9 strings.
BILLION_LAUGHS = (
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    + "".join(
        f"{level}: &{level} [{','.join([f'*{previous}'] * 9)}]\n"
        for previous, level in zip("abcdefgh", "bcdefghi", strict=True)
    )
    + "apiVersion: ttsfleet.io/v1alpha1\nkind: TTSService\nmetadata: {name: lol}\n"
    + "spec: {model: {size: 0.6B, variant: Base}}\n"
)


def render_refusal(tmp_path, capsys, text: str) -> str:
    path = tmp_path / "input.yaml"
    path.write_text(text)
    assert main(["render", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    return captured.err


def test_render_refuses_an_alias_bomb_before_building_it(tmp_path, capsys):
    assert 400 < len(BILLION_LAUGHS.encode()) < 600
    assert "expands to more than 20000 nodes" in render_refusal(tmp_path, capsys, BILLION_LAUGHS)
    # Thirty levels stand for 9**30 nodes, more than any memory holds: refusing it at all
    # proves the loader counts over the alias graph and never builds the expansion.
    deeper = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 31)
    )
    assert "expands to more than 20000 nodes" in render_refusal(tmp_path, capsys, deeper)


def test_render_refuses_a_recursive_alias_and_deep_nesting(tmp_path, capsys):
    assert "expands to more than" in render_refusal(tmp_path, capsys, "spec: &s {model: *s}\n")
    assert "more than 64 '[' or '{'" in render_refusal(
        tmp_path, capsys, "[" * 500_000 + "]" * 500_000
    )
    assert "nested too deeply" in render_refusal(tmp_path, capsys, "- " * 100_000)


def test_render_refuses_a_huge_document_without_reading_it_all(tmp_path, capsys):
    text = "# " + "x" * (2 * 1024 * 1024) + "\n"
    assert "at most 1048576 are read" in render_refusal(tmp_path, capsys, text)


@pytest.mark.parametrize(
    "text", ["- a\n- b\n", "just a string\n", "metadata: [1]\n", "a: b: c\n", "\xff"]
)
def test_render_refuses_what_is_not_a_tts_service_with_a_message(tmp_path, capsys, text):
    assert render_refusal(tmp_path, capsys, text).startswith("error: ")


@pytest.mark.parametrize("value", ["!!float ''", "!!int 0xZZ", "!!binary /w==", "!!set {a}"])
def test_render_refuses_scalars_their_tags_cannot_hold(tmp_path, capsys, value):
    # Found by test_spec_fuzz: PyYAML's constructors raised IndexError and ValueError here.
    text = (
        f"apiVersion: ttsfleet.io/v1alpha1\nkind: TTSService\nmetadata: {{name: tts, x: {value}}}\n"
    )
    assert "not valid YAML" in render_refusal(tmp_path, capsys, text)


def test_render_reads_timestamps_as_strings_as_kubectl_sends_them():
    from ttsfleet_operator.yaml_input import load_documents

    assert load_documents("a: 2001-13-45\nb: 2026-11-23T01:00:00Z\n") == [
        {"a": "2001-13-45", "b": "2026-11-23T01:00:00Z"}
    ]


@pytest.mark.parametrize("namespace", ["../kube-system", "Voice", "a" * 64])
def test_render_refuses_a_namespace_that_is_no_dns_label(tmp_path, capsys, namespace):
    path = tmp_path / "tts.yaml"
    path.write_text((REPO / "samples" / "base-0.6b.yaml").read_text())
    assert main(["render", "-f", str(path), "-n", namespace]) == 1
    assert "is not a namespace name" in capsys.readouterr().err


def test_render_refuses_a_file_that_is_not_utf_8(tmp_path, capsys):
    path = tmp_path / "binary.yaml"
    path.write_bytes(b"spec: \xff\xfe\n")
    assert main(["render", "-f", str(path)]) == 1
    assert "codec can't decode" in capsys.readouterr().err


def test_render_names_the_hostile_field(tmp_path, capsys):
    text = (
        "apiVersion: ttsfleet.io/v1alpha1\nkind: TTSService\nmetadata: {name: tts}\n"
        "spec:\n  model: {size: 1.7B, variant: Base, source: {pvc: {claimName: m, path: /../../etc}}}\n"
    )
    assert "model.source.pvc.path must not contain '..'" in render_refusal(tmp_path, capsys, text)


def test_render_prints_no_api_keys_secret_and_says_the_operator_creates_it(capsys):
    # Applied (`ttsfleet render | kubectl apply -f -`, GitOps), a rendered Secret would
    # replace the operator's key, and its key would sit in CI logs.
    assert main(["render", "-f", str(REPO / "samples" / "base-0.6b.yaml")]) == 0
    printed = capsys.readouterr()
    manifests = [m for m in yaml.safe_load_all(printed.out) if m]
    assert "Secret" not in {m["kind"] for m in manifests}
    assert "ttsf_" not in printed.out + printed.err
    assert "Secret default/tts-base-api-keys" in printed.err
    assert "kubectl get secret tts-base-api-keys -n default" in printed.err
    (deployment,) = [m for m in manifests if m["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert any(v.get("secret", {}).get("secretName") == "tts-base-api-keys" for v in volumes)
