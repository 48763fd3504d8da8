"""StreamingCodec: pushing frames in any chunks, for any mix of streams, gives the offline
waveform of each stream."""

from __future__ import annotations

import random

import pytest
import torch

from ttsfleet_runtime.speech_tokenizer.rate12.streaming import StreamingCodec

# Offline decode runs as one pass; streaming sums the same terms in other groupings.
TOL = dict(atol=1e-5, rtol=1e-4)
FRAMES = 20  # over twice the tiny sliding window (8 frames)


def stream(
    codec: StreamingCodec, slot: int, codes: torch.Tensor, chunks: list[int]
) -> torch.Tensor:
    out, start = [], 0
    for n in chunks:
        out.append(codec.decode([slot], codes[None, start : start + n])[0])
        start += n
    assert start == codes.shape[0]
    return torch.cat(out)


def random_chunks(total: int, seed: int) -> list[int]:
    rng, chunks = random.Random(seed), []
    while sum(chunks) < total:
        chunks.append(min(rng.randint(1, 9), total - sum(chunks)))
    return chunks


@pytest.fixture(scope="module")
def one_stream(tiny_decoder):
    """(codes [FRAMES, 16], offline waveform) of one stream, decoded once for the module."""
    codes = torch.randint(0, 2048, (FRAMES, 16), generator=torch.Generator().manual_seed(10))
    return codes, tiny_decoder.decode(codes[None])[0]


@pytest.mark.parametrize(
    "chunks",
    [
        [1] * FRAMES,
        [1, 1, 2, 4, 8, 4],
        [7, 1, 12],
        random_chunks(FRAMES, seed=3),
        random_chunks(FRAMES, seed=4),
    ],
    ids=["ones", "doubling", "uneven", "random-a", "random-b"],
)
def test_any_chunk_schedule_gives_the_offline_waveform(tiny_decoder, one_stream, chunks):
    codes, offline = one_stream
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    streamed = stream(codec, codec.open(), codes, chunks)
    assert streamed.shape == (FRAMES * 1920,)
    torch.testing.assert_close(streamed, offline, **TOL)


def test_streams_batched_together_each_get_their_own_waveform(tiny_decoder, random_codes):
    codes = random_codes(3, FRAMES, seed=11)
    offline = tiny_decoder.decode(codes)
    codec = StreamingCodec(tiny_decoder, max_streams=3, device="cpu")
    a, b, c = codec.open(), codec.open(), codec.open()
    parts = {a: [], b: [], c: []}
    row = {a: 0, b: 1, c: 2}
    done = {a: 0, b: 0, c: 0}

    def push(slots, n):
        pcm = codec.decode(
            slots, torch.stack([codes[row[s], done[s] : done[s] + n] for s in slots])
        )
        for s, p in zip(slots, pcm, strict=True):
            parts[s].append(p)
            done[s] += n

    # Streams start at different times and are batched in changing groups and orders.
    push([a], 5)
    push([b, a], 3)
    push([c, a, b], 2)
    push([a, c], 1)
    push([b], 10)
    push([a, b, c], 4)
    push([c, a], FRAMES - done[c] - 10)
    push([c], 10)
    push([a], FRAMES - done[a])
    push([b], FRAMES - done[b])
    for s in (a, b, c):
        torch.testing.assert_close(torch.cat(parts[s]), offline[row[s]], **TOL)


def test_a_step_that_fails_after_its_attention_leaves_every_stream_as_it_was(
    tiny_decoder, random_codes
):
    """The step writes the key/value rings in place before its upsampling: a batched step
    that raises there (an out-of-memory, injected) must leave its streams as they were, so
    that decoded again one by one (the codec worker's retry) each stream's audio is byte
    for byte its audio decoded alone."""
    codes = random_codes(3, 12, seed=16)
    chunks = [(0, 4), (4, 8), (8, 12)]  # past the tiny 8-frame window: the ring evicts

    def alone(row: int) -> torch.Tensor:
        codec = StreamingCodec(tiny_decoder, max_streams=1, device="cpu")
        return stream(codec, codec.open(), codes[row], [b - a for a, b in chunks])

    codec = StreamingCodec(tiny_decoder, max_streams=3, device="cpu")
    slots = [codec.open() for _ in range(3)]
    heard: list[list[torch.Tensor]] = [[] for _ in slots]
    upsampling = tiny_decoder.upsample[0][1]

    def out_of_memory(*args, **kwargs):
        raise RuntimeError("injected: out of memory after the attention")

    for number, (a, b) in enumerate(chunks):
        if number == 1:
            upsampling.forward = out_of_memory
            try:
                with pytest.raises(RuntimeError, match="injected"):
                    codec.decode(slots, codes[:, a:b])
            finally:
                del upsampling.forward
        for row, slot in enumerate(slots):  # the retry, and every other call, alone
            heard[row].append(codec.decode([slot], codes[row : row + 1, a:b])[0])
    for row in range(3):
        assert torch.cat(heard[row]).numpy().tobytes() == alone(row).numpy().tobytes()


def test_a_reopened_slot_starts_a_fresh_stream(tiny_decoder, random_codes):
    first, second = random_codes(2, 12, seed=12)
    codec = StreamingCodec(tiny_decoder, max_streams=1, device="cpu")
    slot = codec.open()
    codec.decode([slot], first[None])
    codec.close(slot)
    again = codec.open()
    assert again == slot  # the only slot, so its old state must have been cleared
    torch.testing.assert_close(
        codec.decode([again], second[None])[0], tiny_decoder.decode(second[None])[0], **TOL
    )


def test_opening_a_slot_zeroes_its_rows_of_every_buffer_and_no_other(tiny_decoder, random_codes):
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    a, b = codec.open(), codec.open()
    codec.decode([a, b], random_codes(2, 12, seed=15))
    buffers = [*codec._state.values(), *codec._rings.values()]
    b_rows = [rows[b].clone() for rows in buffers]
    assert all(rows[a].count_nonzero() > 0 for rows in buffers)  # the step wrote them all
    codec.close(a)
    assert codec.open() == a
    assert all(rows[a].count_nonzero() == 0 for rows in buffers)
    for rows, before in zip(buffers, b_rows, strict=True):
        assert torch.equal(rows[b], before)


def test_closing_one_stream_leaves_the_others_untouched(tiny_decoder, random_codes):
    codes = random_codes(2, 16, seed=13)
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    keep, leave = codec.open(), codec.open()
    head = codec.decode([keep, leave], codes[:, :8])[0]
    codec.close(leave)
    newcomer = codec.open()  # takes the freed slot
    codec.decode([newcomer], random_codes(1, 5, seed=14))
    tail = codec.decode([keep], codes[:1, 8:])[0]
    torch.testing.assert_close(torch.cat([head, tail]), tiny_decoder.decode(codes[:1])[0], **TOL)


def test_slots_run_out_and_come_back(tiny_decoder):
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    slots = [codec.open(), codec.open()]
    assert sorted(slots) == [0, 1] and codec.active == 2
    with pytest.raises(RuntimeError, match="in use"):
        codec.open()
    codec.close(slots[0])
    assert codec.open() == slots[0]


def test_state_bytes_per_stream_count_the_key_value_rings(tiny_decoder):
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    one_stream = tiny_decoder.initial_state(1)
    assert any(key.endswith(".kv_ring") for key in one_stream)
    total = sum(t.numel() * t.element_size() for t in one_stream.values())
    assert codec.state_bytes_per_stream == total


def test_decoding_a_slot_that_is_not_open_is_refused(tiny_decoder, random_codes):
    codec = StreamingCodec(tiny_decoder, max_streams=2, device="cpu")
    slot = codec.open()
    codes = random_codes(1, 1, seed=0)
    with pytest.raises(ValueError, match="open slots"):
        codec.decode([slot + 1], codes)
    with pytest.raises(ValueError, match="open slots"):
        codec.decode([slot, slot], torch.cat([codes, codes]))
    with pytest.raises(ValueError, match="codes must be"):
        codec.decode([slot], codes[..., :15])


def test_bfloat16_streaming_stays_close_to_the_float32_waveform(
    tiny_tokenizer_dir, tiny_decoder, random_codes
):
    # bf16 is what the GPU runs; it differs from float32 by rounding only, so the error
    # stays a small fraction of the signal (a dtype mix-up would be of the signal's size).
    from ttsfleet_runtime.speech_tokenizer.rate12 import load_speech_tokenizer

    codes = random_codes(1, 8, seed=15)
    reference = tiny_decoder.decode(codes)[0]
    codec = StreamingCodec(
        load_speech_tokenizer(tiny_tokenizer_dir, dtype=torch.bfloat16), max_streams=1, device="cpu"
    )
    streamed = stream(codec, codec.open(), codes[0], [1, 2, 5])
    assert streamed.dtype == torch.float32
    error = (streamed - reference).abs()
    assert error.mean() < 0.05 * reference.abs().mean()
    assert error.max() < 0.1


class _EagerReplay:
    """Stands in for torch.cuda.CUDAGraph (no GPU here): replay recomputes the captured
    step eagerly from the same static input buffers into the same output buffer."""

    def __init__(self, step):
        self.step = step
        self.replays = 0

    def replay(self):
        self.replays += 1
        self.step.pcm.copy_(self.step.codec._step(self.step.index, self.step.codes))


def stand_in_bucket(codec: StreamingCodec, batch: int, frames: int) -> _EagerReplay:
    """A captured (batch, frames) bucket whose graph is an `_EagerReplay`."""
    from ttsfleet_runtime.speech_tokenizer.rate12.streaming import _CapturedStep

    bucket = _CapturedStep.__new__(_CapturedStep)  # its CUDA capture cannot run here
    bucket.codec, bucket.batch = codec, batch
    bucket.index = torch.full((batch,), codec._scratch, dtype=torch.long)
    bucket.codes = torch.zeros((batch, frames, 16), dtype=torch.long)
    bucket.pcm = torch.zeros((batch, frames * 1920))
    bucket.graph = _EagerReplay(bucket)
    codec._graphs[(batch, frames)] = bucket
    return bucket.graph


def test_a_batch_padded_up_to_a_captured_bucket_decodes_only_its_own_streams(
    tiny_decoder, random_codes
):
    codec = StreamingCodec(tiny_decoder, max_streams=3, device="cpu")
    stand_in_bucket(codec, batch=3, frames=2)

    codes = random_codes(2, 6, seed=16)
    offline = tiny_decoder.decode(codes)
    a, b = codec.open(), codec.open()
    head_a = codec.decode([a], codes[:1, :2])  # batch 1 padded to the 3-stream bucket
    rest = codec.decode([b, a], torch.stack([codes[1, :2], codes[0, 2:4]]))
    tail_b = codec.decode([b], codes[1:, 2:6])  # 4 frames: no bucket, eager
    tail_a = codec.decode([a], codes[:1, 4:6])
    torch.testing.assert_close(torch.cat([head_a[0], rest[1], tail_a[0]]), offline[0], **TOL)
    torch.testing.assert_close(torch.cat([rest[0], tail_b[0]]), offline[1], **TOL)


def test_a_batch_larger_than_every_captured_bucket_decodes_eagerly(tiny_decoder, random_codes):
    # Right after ready only batch 1 has its graphs; the others come in the background.
    codec = StreamingCodec(tiny_decoder, max_streams=3, device="cpu")
    single = stand_in_bucket(codec, batch=1, frames=2)

    codes = random_codes(3, 4, seed=17)
    offline = tiny_decoder.decode(codes)
    slots = [codec.open() for _ in range(3)]
    first = codec.decode(slots, codes[:, :2])
    assert single.replays == 0
    second = codec.decode(slots, codes[:, 2:])
    torch.testing.assert_close(torch.cat([first, second], dim=1), offline, **TOL)


def test_the_attention_kernel_gives_the_torch_waveforms(decoder_on, random_codes, one_stream):
    # The kernel reads and writes the same key/value rings as the torch path: offline in
    # chunks longer than the ring, streamed in a padded bucket and eagerly, any chunks.
    # The Triton attention kernel in place of torch's (here in Triton's interpreter).
    on_kernel = decoder_on("eager", attention="kernel")
    codes, offline = one_stream
    torch.testing.assert_close(on_kernel.decode(codes[None], chunk_frames=9)[0], offline, **TOL)
    codec = StreamingCodec(on_kernel, max_streams=2, device="cpu")
    stand_in_bucket(codec, batch=2, frames=3)
    a, b = codec.open(), codec.open()
    other = random_codes(1, 6, seed=18)
    head = codec.decode([a], codes[None, :3])[0]  # padded with the scratch slot
    both = codec.decode([b, a], torch.stack([other[0, :3], codes[3:6]]))
    codec.close(b)
    tail = stream(codec, a, codes[6:], [1, 8, 5])
    torch.testing.assert_close(torch.cat([head, both[1], tail]), offline, **TOL)
