"""Property-based requests from the server's own OpenAPI schema: never a 5xx.

Schemathesis generates valid and invalid bodies, parameters and multipart
uploads for every documented operation; each response must be non-5xx with a
documented status. (Its "valid data must be accepted" check is left out: a
schema cannot say which bytes are decodable audio, or that consent must be given.)
Examples are bounded to keep the run short on two cores.
(Driven through hypothesis directly: schemathesis' pytest plugin does not
load under this pytest.)
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import status_code_conformance

from support.live_server import auth


def operations(server):
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    return {op.ok().label: op.ok() for op in schema.get_all_operations()}


def test_schema_documents_every_api_route(server):
    assert set(operations(server)) >= {
        "POST /v1/audio/speech",
        "POST /v1/audio/speech/with-timestamps",
        "GET /v1/models",
        "GET /v1/audio/voices",
        "POST /v1/audio/voices",
        "DELETE /v1/audio/voices/{voice_id}",
        "GET /health/live",
        "GET /health/ready",
    }


POSITIVE, NEGATIVE = GenerationMode.POSITIVE, GenerationMode.NEGATIVE


@pytest.mark.parametrize(
    ("label", "mode"),
    [
        ("POST /v1/audio/speech", POSITIVE),
        ("POST /v1/audio/speech", NEGATIVE),
        ("POST /v1/audio/speech/with-timestamps", POSITIVE),
        ("POST /v1/audio/speech/with-timestamps", NEGATIVE),
        ("POST /v1/audio/voices", POSITIVE),
        ("POST /v1/audio/voices", NEGATIVE),
        ("DELETE /v1/audio/voices/{voice_id}", POSITIVE),
        # A string path parameter or no input at all: nothing ill-formed to send.
        ("GET /v1/models", POSITIVE),
        ("GET /v1/audio/voices", POSITIVE),
        ("GET /health/ready", POSITIVE),
    ],
)
def test_no_generated_request_gets_a_server_error(server, label, mode):
    operation = operations(server)[label]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None
    )
    def check(case):
        case.call_and_validate(
            base_url=server.base_url,
            headers=auth(),
            timeout=60,
            checks=[not_a_server_error, status_code_conformance],
        )

    check()
