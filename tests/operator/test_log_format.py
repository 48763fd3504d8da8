"""Operator logs are JSON lines with the `extra=` fields, without kopf's bulky internals."""

import json
import logging

from ttsfleet_operator.log_format import JsonFormatter


def test_extra_fields_become_json_keys_and_kopf_settings_are_dropped():
    record = logging.LogRecord(
        "ttsfleet", logging.INFO, __file__, 1, "reconciled %s", ("demo",), None
    )
    record.service = "demo"
    record.children_created = ["Deployment demo-spot"]
    record.settings = object()  # kopf attaches its whole OperatorSettings
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "reconciled demo" and entry["level"] == "info"
    assert entry["service"] == "demo" and entry["children_created"] == ["Deployment demo-spot"]
    assert "settings" not in entry
