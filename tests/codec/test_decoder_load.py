"""Loading the speech tokenizer's decoder, and the whole engine, never imports Dynamo.

Nothing in the runtime uses torch.compile, yet torch imports Dynamo and Inductor (3-4 s,
measured on the H100 as a server's start) the first time any arithmetic runs on the
"meta" device: its Python decompositions are wrapped to keep Dynamo out. The codec
decoder used to be made on "meta" and derived its layouts there. Checked in a fresh
process, since any earlier test may have imported Dynamo into this one."""

from __future__ import annotations

import subprocess
import sys

import pytest

START_ENGINE = """
import asyncio, sys
from ttsfleet_runtime.engine.tts_engine import TTSEngine

async def main():
    engine = TTSEngine(sys.argv[1], "cpu", warm_up=False)
    await engine.start()  # a Base model's voice encoders load here too
    print("dynamo imported" if "torch._dynamo" in sys.modules else "no dynamo")
    await engine.stop()

asyncio.run(main())
"""


@pytest.mark.parametrize("checkpoint", ["tiny_custom_voice", "tiny_base"])
def test_starting_the_engine_imports_no_dynamo(checkpoint, request):
    done = subprocess.run(
        [sys.executable, "-c", START_ENGINE, str(request.getfixturevalue(checkpoint))],
        capture_output=True,
        text=True,
        timeout=240,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "no dynamo", done.stderr[-2000:]
