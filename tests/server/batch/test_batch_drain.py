"""Interruption-aware workers: when a pod starts draining (SIGTERM: a rollout, a scale-in, a
spot preemption notice) its batch worker abandons the items it runs and hands their leases
back at once, so another pod takes them now; it neither finishes nor records them, and
claims nothing more, though the engine still runs for the interactive streams."""

from __future__ import annotations

from support.batches import batch_settings, speech_line, submit
from support.live_server import API_KEY, LiveServer
from support.polling import wait_for
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


def test_a_draining_worker_hands_its_leases_back_and_records_nothing(
    make_engine, redis_server, s3_server
):
    import openai

    redis = redis_server.client()
    redis.flushdb()
    # Hour-long leases and items: only a hand-back can free them during the test.
    settings = ServerSettings(
        **batch_settings(redis_server, s3_server, batch_lease_s=3600.0, max_audio_seconds=30.0)
    )
    with LiveServer(make_engine(), settings, ApiKeys((API_KEY,))) as server:
        client = openai.OpenAI(base_url=server.base_url + "/v1", api_key=API_KEY, max_retries=0)
        model = server.runtime.served_models[0]
        batch = submit(client, [speech_line(f"p{i}", model) for i in range(4)])
        keys = f"ttsfleet:batch:job:{batch.id}"
        held = wait_for(
            lambda: set(redis.hkeys(keys + ":holders")), 60, 0.05, "the worker to hold leases"
        )

        async def sigterm():  # what serve.py does first on SIGTERM
            server.runtime.drain.begin()

        server.call(sigterm)

        wait_for(lambda: not redis.hkeys(keys + ":holders"), 30, 0.05, "the leases handed back")
        assert held <= set(redis.lrange(keys + ":pending", 0, -1))
        assert redis.hlen(keys + ":results") == 0
        assert redis.llen(keys + ":pending") == 4  # and nothing claimed since
        released = server.runtime.metrics.registry.get_sample_value(
            "ttsfleet_batch_items_total", {"outcome": "released"}
        )
        assert released == len(held)
        assert server.runtime.engine.ready  # the engine runs on for interactive streams
