"""While a server runs, what start-up made (model, engine, libraries) is frozen out of
the garbage collector's passes (server/interpreter.py), so a full collection does not
stop every thread for the time it takes to traverse it; after shutdown it is
collectable again."""

from __future__ import annotations

import gc

import httpx

from support.live_server import LiveServer
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
