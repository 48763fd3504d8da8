"""Pure renderers: a TTSService in, plain manifest dicts out. No API calls here."""

from ttsfleet_operator.render.fleet import render_fleet

__all__ = ["render_fleet"]
