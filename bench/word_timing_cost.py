#!/usr/bin/env python3
"""The engine thread's cost of word timestamps, on the CPU: a `WordClock` driven frame by
frame as the scheduler drives it, over a text read one token a frame (docs/timestamps.md
quotes the result). The text's tokenisation is admission's and is not timed.

    PYTHONPATH=runtime python3 bench/word_timing_cost.py [--checkpoint DIR] [--repeats 30]

Without --checkpoint it writes the tiny random CustomVoice checkpoint to a temporary
folder. Prints the best run of --repeats: milliseconds a request, microseconds a frame.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ttsfleet_runtime.bench.common import TEXT
from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint
from ttsfleet_runtime.engine.sequence import TextFeed
from ttsfleet_runtime.engine.word_timing import WordClock
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--copies", type=int, default=6, help="copies of the benchmark text")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = args.checkpoint or write_random_checkpoint(
            Path(tmp), "tiny", "CustomVoice", seed=3
        )
        tok = TextTokenizer.from_checkpoint(checkpoint)
    text = (TEXT + " ") * args.copies
    feed = TextFeed(tok.encode, text, encode_offsets=tok.encode_offsets)
    feed.refresh()
    frames = len(feed.ids) + 50  # the whole text read, then frames after it
    best = float("inf")
    for _ in range(args.repeats):
        clock = WordClock(12.5, 1, 0, text, [text])
        started = time.perf_counter()
        for frame in range(frames):
            clock.frame_made(frame, frame, feed)
            if frame % 8 == 0:  # a chunk takes the words timed so far
                clock.take()
        clock.piece_ended(frames)
        clock.take()
        best = min(best, time.perf_counter() - started)
    print(
        f"{len(feed.ids)} tokens, {len(text.split())} words, {frames} frames: "
        f"{best * 1e3:.2f} ms a request, {best / frames * 1e6:.2f} us a frame "
        f"(best of {args.repeats})"
    )


if __name__ == "__main__":
    main()
