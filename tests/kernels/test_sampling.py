"""The sort-free sampling kernel against model.sampling (the sort), id for id.

Runs in Triton's interpreter on the CPU (TRITON_INTERPRET=1). Every id must be
equal, ties in the logits included (bf16 logits have many; the kernel keeps
the sort's tie order).
"""

from __future__ import annotations

import pytest
import torch

from ttsfleet_runtime.kernels import sampling as kern
from ttsfleet_runtime.model import sampling as ref

TEMPERATURES = (0.7, 1.0, 1.3)
TOP_KS = (0, 1, 5, 50, "V", "V+7")
TOP_PS = (0.1, 0.5, 0.9, 1.0)


def _params(gen: torch.Generator, V: int, rows: int):
    """Per-row parameters, mixed: row i takes TEMPERATURES[i % 3], TOP_KS[i % 6],
    TOP_PS[i % 4] (12 rows: every value, every temperature x top_p pair), then
    one greedy row with cuts; fresh seeds and counters. (The interpreter runs
    ~0.15 s per row: the GPU benchmark runs the full product.)"""
    combos = [(TEMPERATURES[i % 3], TOP_KS[i % 6], TOP_PS[i % 4]) for i in range(rows)]
    combos.append((0.0, 5, 0.5))
    k_of = {"V": V, "V+7": V + 7}
    temperature = torch.tensor([c[0] for c in combos], dtype=torch.float32)
    top_k = torch.tensor([k_of.get(c[1], c[1]) for c in combos], dtype=torch.int64)
    top_p = torch.tensor([c[2] for c in combos], dtype=torch.float32)
    B = len(combos)
    seed = torch.randint(-(2**62), 2**62, (B,), generator=gen)
    counter = torch.randint(0, 2**40, (B,), generator=gen)
    return temperature, top_k, top_p, seed, counter


@pytest.mark.parametrize("V, rows", [(2048, 12), (3072, 6), (37, 6)])
def test_mixed_parameters_in_one_batch_match_the_sort(V, rows):
    gen = torch.Generator().manual_seed(1000 + V)
    params = _params(gen, V, rows)
    logits = torch.randn(len(params[0]), V, generator=gen) * 3.0
    want = ref.sample(logits, *params)
    got = kern.sample(logits, *params)
    assert got.dtype == torch.int64
    assert torch.equal(got, want), (got != want).nonzero().flatten().tolist()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_match_the_sort(dtype):
    """bf16 rows of 2048 tie at the top-k cut more often than not."""
    gen = torch.Generator().manual_seed(7)
    V = 2048
    params = _params(gen, V, 6 if dtype == torch.bfloat16 else 4)
    logits = (torch.randn(len(params[0]), V, generator=gen) * 3.0).to(dtype)
    assert torch.equal(kern.sample(logits, *params), ref.sample(logits, *params))


def test_massive_ties_keep_the_sorts_tie_order():
    gen = torch.Generator().manual_seed(23)
    V = 300
    params = _params(gen, V, 6)
    B = len(params[0])
    # 7 values, all negative: the cuts fall below the padding lanes' key (0).
    logits = torch.randint(-7, 0, (B, V), generator=gen).float() - 0.5
    # top_p away from the structured masses of equal probabilities.
    top_p = params[2] * 0.97 + 0.013
    params = (params[0], params[1], torch.where(params[2] >= 1, 1.0, top_p), *params[3:])
    got = kern.sample(logits, *params)
    want = ref.sample(logits, *params)
    assert torch.equal(got, want), (got != want).nonzero().flatten().tolist()


def test_a_cut_through_tied_tokens_keeps_the_first_in_index_order():
    gen = torch.Generator().manual_seed(29)
    B, V = 16, 40
    group = [3, 7, 8, 15, 20, 21, 30, 31, 35, 39]  # tied at the top, p ~ 0.1 each
    logits = torch.full((B, V), -10.0)
    logits[:, group] = 5.0
    top_k = torch.tensor([2] * 8 + [0] * 8)  # keeps 3, 7
    top_p = torch.tensor([1.0] * 8 + [0.25] * 8)  # mass before: 0, .1, .2 -> keeps 3, 7, 8
    params = (torch.ones(B), top_k, top_p, torch.randint(0, 2**40, (B,), generator=gen))
    params += (torch.randint(0, 2**40, (B,), generator=gen),)
    got = kern.sample(logits, *params)
    assert set(got[:8].tolist()) == {3, 7}
    assert set(got[8:].tolist()) == {3, 7, 8}
    assert torch.equal(got, ref.sample(logits, *params))


def test_greedy_is_the_first_maximum_whatever_the_cuts():
    gen = torch.Generator().manual_seed(3)
    B, V = 6, 300
    logits = torch.randn(B, V, generator=gen)
    logits[0, 7] = logits[0, 200] = logits[0].max() + 1.0  # tie: the first index wins
    temperature = torch.tensor([0.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    top_k = torch.tensor([0, 1, 5, V, 3, 0])
    top_p = torch.tensor([1.0, 0.1, 0.5, 0.9, 1.0, 0.01])
    seed = torch.randint(0, 2**31, (B,), generator=gen)
    counter = torch.arange(B)
    got = kern.sample(logits, temperature, top_k, top_p, seed, counter)
    assert got.tolist() == logits.argmax(dim=-1).tolist()
    assert got[0].item() == 7
    assert torch.equal(got, ref.sample(logits, temperature, top_k, top_p, seed, counter))


def test_processors_match_first_code_logits_then_the_sort():
    gen = torch.Generator().manual_seed(11)
    V = 3072
    temperature, top_k, top_p, seed, counter = _params(gen, V, 6)
    B = len(temperature)
    logits = torch.randn(B, V, generator=gen) * 3.0
    seen = torch.rand(B, V, generator=gen) < 0.05
    seen[:, :4] = True  # the maximum region too: penalties move the cuts
    logits[:, :4] = logits.abs().amax(dim=1, keepdim=True) + torch.rand(B, 4, generator=gen)
    penalty = 1.0 + torch.rand(B, generator=gen)
    suppressed = torch.zeros(V, dtype=torch.bool)
    suppressed[V - 1024 :] = True
    suppressed[1] = True  # one of the largest logits
    eos_only = torch.zeros(V, dtype=torch.bool)
    eos_only[2] = True  # another of the largest
    too_early = torch.rand(B, generator=gen) < 0.5
    processed = ref.first_code_logits(logits, seen, penalty, suppressed, eos_only, too_early)
    want = ref.sample(processed, temperature, top_k, top_p, seed, counter)
    got = kern.sample(
        logits,
        temperature,
        top_k,
        top_p,
        seed,
        counter,
        seen=seen,
        penalty=penalty,
        suppressed=suppressed,
        eos_only=eos_only,
        too_early=too_early,
    )
    assert torch.equal(got, want), (got != want).nonzero().flatten().tolist()
    assert not suppressed[got].any()
    assert (got[too_early] != 2).all()


def test_strided_rows_columns_and_parameters():
    gen = torch.Generator().manual_seed(5)
    B, V = 4, 500
    big = torch.randn(B, 2 * V, generator=gen)
    temperature = torch.tensor([1.0, 0.0] * B)[::2]  # strided, all 1.0
    top_k = torch.tensor([50, -1] * B)[::2]
    top_p = torch.tensor([0.9, 0.0] * B)[::2]
    seed = torch.randint(0, 2**40, (2 * B,), generator=gen)[::2]
    counter = torch.randint(0, 2**40, (2 * B,), generator=gen)[::2]
    for logits in (big[:, V:], big[:, ::2]):  # row stride 2V; column stride 2
        params = (temperature, top_k, top_p, seed, counter)
        want = ref.sample(logits.contiguous(), *params)
        assert torch.equal(kern.sample(logits, *params), want)


def test_noise_is_the_torch_hash():
    gen = torch.Generator().manual_seed(13)
    B, V = 16, 3072
    seed = torch.randint(-(2**62), 2**62, (B,), generator=gen)
    seed[0] = 0
    counter = torch.randint(0, 2**40, (B,), generator=gen)
    want = ref.gumbel_noise(seed, counter, V)
    got = kern.gumbel_noise(seed, counter, V)
    # A wrong bit in the hash gives an unrelated draw (noise off by O(1)); the
    # logs may round differently off the GPU (numpy's vs torch's) by an ulp.
    # bench/kernel_sampling.py checks bit equality on the GPU (libdevice logf).
    torch.testing.assert_close(got, want, rtol=3e-7, atol=3e-7)


def test_sampling_uniform_logits_is_the_argmax_of_the_torch_noise():
    """Inside the sampling kernel: equal logits, no cuts -> argmax of the noise
    of (seed, counter), over many counters."""
    gen = torch.Generator().manual_seed(17)
    B, V = 32, 2048
    seed = torch.full((B,), 123456789, dtype=torch.int64)
    counter = torch.arange(B) * 16 + torch.randint(0, 16, (B,), generator=gen)
    ones = torch.ones(B)
    logits = torch.full((B, V), 0.25)
    got = kern.sample(logits, ones, torch.zeros(B, dtype=torch.int64), ones, seed, counter)
    want = ref.gumbel_noise(seed, counter, V).argmax(dim=-1)
    assert torch.equal(got, want)
    assert len(set(got.tolist())) > B // 2  # the counter does change the draw


def test_processors_all_or_none():
    x = torch.randn(2, 16)
    ones, zeros = torch.ones(2), torch.zeros(2, dtype=torch.int64)
    with pytest.raises(ValueError):
        kern.sample(x, ones, zeros, ones, zeros, zeros, seen=torch.zeros(2, 16, dtype=torch.bool))
