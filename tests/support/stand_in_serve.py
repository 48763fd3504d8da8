"""`ttsfleet-runtime serve` around the stand-in engine, as its own process.

Everything but the engine is the real server process (flags and variables,
settings, voice store, uvicorn, SIGTERM draining); the engine is
stand_in_engine.py's Base variant, which clones without the real encoders.
Run as `python -m support.stand_in_serve [serve flags]` (`--model` is still
required by the CLI; its value is not read).
"""

from __future__ import annotations

import sys

from support.stand_in_engine import StandInEngine
from ttsfleet_runtime import cli
from ttsfleet_runtime.server import serve


def main() -> int:
    # The one stand-in part: what `serve` would load from the checkpoint.
    serve.build_engine = lambda settings: StandInEngine(variant="Base", frames=10)
    return cli.main(["serve", *sys.argv[1:]])


if __name__ == "__main__":
    raise SystemExit(main())
