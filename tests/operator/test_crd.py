"""The CRD: generated from the model, committed, and fit for the API server."""

import copy
import pathlib

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml

from ttsfleet_operator import cel, crd
from ttsfleet_operator.tts_service import TTSService

REPO = pathlib.Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "samples").glob("*.yaml"))
CRD_FILE = REPO / "crds" / "ttsservices.ttsfleet.io.yaml"
CHART_CRD_FILE = REPO / "charts" / "ttsfleet" / "crds" / "ttsservices.ttsfleet.io.yaml"


def version() -> dict:
    return crd.build()["spec"]["versions"][0]


def schema() -> dict:
    return version()["schema"]["openAPIV3Schema"]


def walk(node: dict, path: str = ""):
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_is_the_generated_one():
    assert CRD_FILE.read_text() == crd.to_yaml(), (
        "run: ttsfleet crd > crds/ttsservices.ttsfleet.io.yaml"
    )


def test_chart_ships_the_same_crd():
    assert CHART_CRD_FILE.read_text() == CRD_FILE.read_text(), (
        "copy crds/ into charts/ttsfleet/crds/"
    )


@pytest.mark.parametrize("kubernetes", ["1.35", "1.36", "1.37"])
def test_crd_is_a_valid_customresourcedefinition(kubernetes):
    kubernetes_validate.validate(yaml.safe_load(CRD_FILE.read_text()), kubernetes, strict=True)


def test_schema_is_structural():
    for path, node in walk(schema()):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ({"anyOf", "oneOf", "allOf", "$ref"} & node.keys()), f"{path} is not structural"
        assert not ("properties" in node and "additionalProperties" in node), (
            f"{path} mixes properties"
        )


def test_strings_and_lists_are_bounded_where_cel_reads_them():
    # CEL cost estimation needs bounds on strings and lists under a rule.
    for path, node in walk(schema()["properties"]["spec"]):
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, f"{path} has no maxLength"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{path} has no maxItems"


def test_scale_and_status_subresources_point_at_real_fields():
    subresources = version()["subresources"]
    assert subresources["status"] == {}
    scale = subresources["scale"]
    assert scale == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    status = schema()["properties"]["status"]["properties"]
    assert status["selector"]["type"] == "string"
    assert status["replicas"]["type"] == "integer"
    assert schema()["properties"]["spec"]["properties"]["replicas"]["type"] == "integer"


def test_names_and_printer_columns():
    names = crd.build()["spec"]["names"]
    assert names["shortNames"] == ["tts"] and names["kind"] == "TTSService"
    columns = {c["name"]: c["jsonPath"] for c in version()["additionalPrinterColumns"]}
    assert columns["Variant"] == ".spec.model.variant"
    assert columns["GPU"] == ".spec.gpu.class"
    assert columns["Ready"] == ".status.readyReplicas" and columns["Desired"] == ".spec.replicas"
    assert columns["Canary"] == ".status.canaryWeight"
    assert columns["Age"] == ".metadata.creationTimestamp"


def cel_rules():
    for path, node in walk(schema()):
        for entry in node.get(cel.VALIDATIONS_KEY, []):
            yield path, entry


def test_every_cel_rule_compiles_and_has_a_message():
    rules = list(cel_rules())
    assert len(rules) >= 9
    environment = celpy.Environment()
    for path, entry in rules:
        environment.compile(entry["rule"])
        assert len(entry["message"]) > 15, f"{path}: {entry['rule']} needs a human message"


def with_defaults(node: dict, value):
    """Apply the schema's defaults the way the API server does (objects only)."""
    if not isinstance(value, dict) or "properties" not in node:
        return value
    value = dict(value)
    for name, child in node["properties"].items():
        if name not in value and "default" in child:
            value[name] = copy.deepcopy(child["default"])
        if name in value:
            value[name] = with_defaults(child, value[name])
    return value


def openapi_validator(node: dict) -> jsonschema.Draft4Validator:
    # OpenAPI v3.0 keywords the JSON schema validator does not know are ignored.
    return jsonschema.Draft4Validator(node)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_sample_passes_the_crd_schema_and_the_model(sample):
    document = yaml.safe_load(sample.read_text())
    defaulted = with_defaults(schema(), document)
    openapi_validator(schema()).validate(defaulted)
    TTSService.model_validate(
        {**document, "metadata": {**document["metadata"], "namespace": "default"}}
    )
    # And the CRD's own CEL rules, read from the CRD (not from the model), hold.
    for path, node in walk(schema()):
        rules = node.get(cel.VALIDATIONS_KEY)
        if rules:
            value = lookup(defaulted, path)
            if value is not None:
                assert cel.failed_messages(rules, value) == [], f"{sample.name} at {path}"


def lookup(document: dict, path: str):
    value = document
    for part in [p for p in path.split(".") if p]:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def test_crd_defaults_equal_the_model_defaults(make_service):
    document = {
        "apiVersion": "ttsfleet.io/v1alpha1",
        "kind": "TTSService",
        "metadata": {"name": "d"},
        "spec": {"model": {"size": "1.7B", "variant": "Base"}},
    }
    from_crd = with_defaults(schema(), document)["spec"]
    from_model = make_service(model={"size": "1.7B", "variant": "Base"}).spec.wire()
    assert from_crd == from_model


def test_object_defaults_pass_their_own_cel_rules_as_written():
    # The API server checks a default against the rules before nested defaults
    # fill it in (a `default: {}` under a rule is refused at CRD creation).
    checked = 0
    for path, node in walk(schema()):
        if isinstance(node.get("default"), dict) and node.get(cel.VALIDATIONS_KEY):
            assert cel.failed_messages(node[cel.VALIDATIONS_KEY], node["default"]) == [], path
            checked += 1
    assert checked >= 2
