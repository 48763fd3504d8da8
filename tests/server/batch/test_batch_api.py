"""The Batch API through the openai SDK against a real server with no worker (batches stay
queued until told), the real Redis and the real S3 server: bad input is refused naming
its line, tenants see only their own, cancel and the completion window end a batch with
every item accounted for."""

from __future__ import annotations

import json

import openai
import pytest

from support.batches import jsonl, model, speech_line, submit


@pytest.mark.parametrize(
    ("second_line", "message"),
    [
        ('{"custom_id": "a", "method": "POST", "url": "/v1/audio/speech", "body": {}}',
         "line 2 of the input file: custom_id 'a' repeats line 1"),
        ('{"custom_id": "b", "method": "POST", "url": "/v1/audio/speech", '
         '"body": {"model": "M", "input": "hi", "response_format": "aiff"}}',
         "line 2 of the input file: body.response_format"),
        ('{"custom_id": "c", "method": "POST", "url": "/v1/chat/completions", "body": {}}',
         'line 2 of the input file: method must be "POST" and url "/v1/audio/speech"'),
        ("not json", "line 2 of the input file: not JSON"),
    ],
)  # fmt: skip
def test_a_bad_input_line_is_refused_at_create_naming_its_line(
    queued_client, api_only_server, second_line, message
):
    first = json.dumps(speech_line("a", model(api_only_server)))
    second = second_line.replace('"M"', json.dumps(model(api_only_server)))
    uploaded = queued_client.files.create(
        file=("bad.jsonl", f"{first}\n{second}\n".encode()), purpose="batch"
    )
    with pytest.raises(openai.BadRequestError) as refused:
        queued_client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/audio/speech", completion_window="24h"
        )
    assert message in refused.value.body["message"]
    assert refused.value.body["param"] == "input_file_id"


def test_another_tenant_sees_neither_the_batch_nor_its_files(queued_client, api_only_server):
    from support.live_server import OTHER_KEY

    other = openai.OpenAI(
        base_url=api_only_server.base_url + "/v1", api_key=OTHER_KEY, max_retries=0
    )
    batch = submit(queued_client, [speech_line("a", model(api_only_server))])
    with pytest.raises(openai.NotFoundError):
        other.batches.retrieve(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.batches.cancel(batch.id)
    with pytest.raises(openai.NotFoundError):
        other.files.content(batch.input_file_id)
    assert batch.id not in [b.id for b in other.batches.list().data]
    queued_client.batches.cancel(batch.id)


def test_a_cancelled_batch_ends_with_each_unrun_item_in_the_error_file(
    queued_client, api_only_server
):
    names = ["a", "b", "c"]
    batch = submit(queued_client, [speech_line(n, model(api_only_server)) for n in names])
    cancelled = queued_client.batches.cancel(batch.id)
    assert cancelled.status == "cancelled" and cancelled.cancelling_at and cancelled.cancelled_at
    errors = jsonl(queued_client, cancelled.error_file_id)
    assert sorted(e["custom_id"] for e in errors) == names
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    assert jsonl(queued_client, cancelled.output_file_id) == []
    assert queued_client.batches.cancel(batch.id).status == "cancelled"  # idempotent


def test_items_not_run_within_the_completion_window_expire(
    queued_client, api_only_server, redis_server
):
    batch = submit(queued_client, [speech_line("a", model(api_only_server))])
    # The window ends now (rather than in 24 h): the batch record's deadline, moved.
    redis_server.client().hset(f"ttsfleet:batch:job:{batch.id}", "expires_at_ms", 0)
    expired = queued_client.batches.retrieve(batch.id)
    assert expired.status == "expired" and expired.expired_at
    (error,) = jsonl(queued_client, expired.error_file_id)
    assert error["custom_id"] == "a" and error["error"]["code"] == "batch_expired"


def test_a_deleted_file_is_gone(queued_client):
    uploaded = queued_client.files.create(file=("x.jsonl", b"{}\n"), purpose="batch")
    assert queued_client.files.retrieve(uploaded.id).bytes == 3
    assert queued_client.files.delete(uploaded.id).deleted
    with pytest.raises(openai.NotFoundError):
        queued_client.files.retrieve(uploaded.id)
