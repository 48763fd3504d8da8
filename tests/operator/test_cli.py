"""The `ttsfleet` command line: render, crd, and the operator's arguments."""

import pathlib
import subprocess
import sys

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
    args = build_parser().parse_args(["operator", "run", "-n", "a", "-n", "b", "--resync-seconds", "5"])
    assert args.namespace == ["a", "b"] and args.resync_seconds == 5.0 and not args.all_namespaces
    args = build_parser().parse_args(["operator", "run", "--all-namespaces", "--kubeconfig", "/k"])
    assert args.all_namespaces and args.kubeconfig == "/k" and args.namespace is None


def test_the_cli_starts_without_torch():
    # The operator image has no torch: the CLI (with the runtime's subcommands
    # registered) must not import it.
    code = "import sys; from ttsfleet_operator.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
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
