"""The 25 Hz decoder's CUDA graphs (the DiT windows, the vocoder on the steady and the
first-block windows) give the audio the eager decoder gives, for streams in every phase
in one call. Needs a CUDA device: skipped elsewhere (CI has none; run on the GPU with
`pytest tests/codec25/test_graphs_on_cuda.py`)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# float32 on both sides; cuDNN and cuBLAS pick algorithms by batch size, so the graphs
# (captured at their bucket's size, padded) and the eager calls agree to rounding.
GRAPH_ROUNDING = 1e-4


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint
    from ttsfleet_runtime.speech_tokenizer.rate25 import load_speech_tokenizer_25hz

    folder = write_random_checkpoint(
        tmp_path_factory.mktemp("ckpt25"), "tiny", tokenizer_rate_hz=25, device="cuda"
    )
    return load_speech_tokenizer_25hz(folder / "speech_tokenizer", "cuda", torch.float32)


def test_graphed_decoding_equals_eager_decoding(decoder, monkeypatch):
    from ttsfleet_runtime.speech_tokenizer.rate25 import streaming as module
    from ttsfleet_runtime.speech_tokenizer.rate25.streaming import StreamingDecoder25Hz

    replays = {"windows": 0, "vocoder": {}}
    windows_run, vocoder_run = module._CapturedWindows.run, module._CapturedVocoder.run

    def count_windows(self, *args):
        replays["windows"] += 1
        return windows_run(self, *args)

    def count_vocoder(self, mel):
        frames = mel.shape[1]
        replays["vocoder"][frames] = replays["vocoder"].get(frames, 0) + 1
        return vocoder_run(self, mel)

    monkeypatch.setattr(module._CapturedWindows, "run", count_windows)
    monkeypatch.setattr(module._CapturedVocoder, "run", count_vocoder)

    eager = StreamingDecoder25Hz(decoder, 8)
    graphed = StreamingDecoder25Hz(decoder, 8)
    graphed.capture([1, 2, 4, 8])
    block = eager.block_codes
    generator = torch.Generator().manual_seed(3)
    # Streams that start one block apart: each call holds first-block windows of every
    # length and steady ones, then all of them end (finish, eager on both sides).
    starts = [0, 1, 2, 3, 4, 5]
    calls = 9
    codes = torch.randint(0, 50, (len(starts), calls * block), generator=generator)
    slots = {name: {} for name in ("eager", "graphed")}
    audio = {name: {i: [] for i in range(len(starts))} for name in slots}
    for call in range(calls):
        for name, streaming in (("eager", eager), ("graphed", graphed)):
            for i, start in enumerate(starts):
                if start == call:
                    slots[name][i] = streaming.open(None)
            live = [i for i in slots[name] if starts[i] <= call]
            part = torch.stack([codes[i, (call - starts[i]) * block :][:block] for i in live])
            out = streaming.decode([slots[name][i] for i in live], part.cuda())
            for i, wave in zip(live, out, strict=True):
                audio[name][i].append(wave)
    for name, streaming in (("eager", eager), ("graphed", graphed)):
        rest = streaming.finish([slots[name][i] for i in range(len(starts))])
        for i, wave in enumerate(rest):
            audio[name][i].append(wave)
    lengths = set()
    for i in range(len(starts)):
        want, got = torch.cat(audio["eager"][i]), torch.cat(audio["graphed"][i])
        lengths.add(want.shape[0])
        torch.testing.assert_close(got, want, rtol=0, atol=GRAPH_ROUNDING)
    assert len(lengths) == len(starts)  # every stream its own length: every phase was met
    # Every window shape was replayed from a graph (the finish's shapes run eagerly).
    assert replays["windows"] > 0
    assert set(replays["vocoder"]) == {graphed.steady_vocoder_frames, *graphed.first_vocoder_frames}
