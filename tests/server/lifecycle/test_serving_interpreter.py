"""While a server runs, what start-up made (model, engine, libraries) is frozen out of
the garbage collector's passes (server/interpreter.py), so a full collection does not
stop every thread for the time it takes to traverse it; after shutdown it is
collectable again. A request, once answered, leaves no reference cycle of the engine's
behind for those passes to find."""

from __future__ import annotations

import contextlib
import gc
import json

import httpx
from websockets.sync.client import connect

from support.live_server import LiveServer, speech_body
from ttsfleet_runtime.server.auth import ApiKeys
from ttsfleet_runtime.settings import ServerSettings


def collector_sees(obj) -> bool:
    """Whether `obj` is in a generation the cyclic collector traverses."""
    return any(o is obj for o in gc.get_objects())


def test_start_up_objects_are_left_out_of_collections_while_serving(make_engine):
    engine = make_engine()
    assert gc.is_tracked(engine) and collector_sees(engine)
    with LiveServer(engine, ServerSettings(), ApiKeys(disabled=True)) as live:
        assert httpx.get(live.base_url + "/health/ready").status_code == 200
        assert gc.get_freeze_count() > 0
        assert not collector_sees(engine) and not collector_sees(engine.core.model)
        made_now = type("MadeWhileServing", (), {})()
        assert collector_sees(made_now)  # what serving makes is collected as usual
    assert gc.get_freeze_count() == 0 and collector_sees(engine)


@contextlib.contextmanager
def cyclic_garbage():
    """The objects that only the cyclic collector frees, made within the block."""
    gc.collect()
    found: list = []
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_answered_requests_leave_no_engine_cycles_to_collect(make_engine):
    """The engine's sequence and the caller's stream refer to each other: once the
    response is out, the stream lets go (`AudioStream.release`), or every request
    would leave its bookkeeping to a full collection, which stops every thread."""
    with LiveServer(
        make_engine(), ServerSettings(max_audio_seconds=0.32), ApiKeys(disabled=True)
    ) as live:
        body = speech_body(live)
        with cyclic_garbage() as garbage:
            for response_format in ("pcm", "mp3"):
                with httpx.stream(
                    "POST",
                    live.base_url + "/v1/audio/speech",
                    json={**body, "response_format": response_format},
                    timeout=60,
                ) as response:
                    assert response.status_code == 200
                    assert len(response.read()) > 0
            with connect(live.ws_url + "/v1/audio/speech/stream") as socket:
                socket.send(json.dumps({"type": "session.config", "voice": "Vivian"}))
                socket.send(json.dumps({"type": "text.delta", "text": "Hello there. "}))
                socket.send(json.dumps({"type": "end"}))
                events = []
                while not events or events[-1] != "session.done":
                    message = socket.recv(timeout=60)
                    if isinstance(message, str):
                        events.append(json.loads(message)["type"])
                assert "utterance.done" in events
        engine_objects = [
            type(o).__name__ for o in garbage if type(o).__name__ in ("Sequence", "EngineStream")
        ]
        assert engine_objects == []
