"""The one sampling routine: greedy, top-k, top-p, seeded noise independent of
the batch, and the reference's first-code logits processors."""

from __future__ import annotations

import torch

from ttsfleet_runtime.model.sampling import first_code_logits, sample


def _rows(n, temperature=1.0, top_k=0, top_p=1.0, seed=0, counter=0):
    return (
        torch.full((n,), float(temperature)),
        torch.full((n,), top_k, dtype=torch.int64),
        torch.full((n,), float(top_p)),
        torch.full((n,), seed, dtype=torch.int64),
        torch.full((n,), counter, dtype=torch.int64),
    )


def test_temperature_zero_is_argmax_with_the_first_index_on_ties():
    logits = torch.tensor([[0.0, 3.0, 3.0, 1.0], [5.0, 0.0, 0.0, 0.0]])
    assert sample(logits, *_rows(2, temperature=0)).tolist() == [1, 0]


def test_top_k_one_and_tiny_top_p_always_pick_the_best_token():
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(0))
    best = logits.argmax(-1)
    for seed in range(20):
        assert torch.equal(sample(logits, *_rows(4, top_k=1, seed=seed)), best)
        assert torch.equal(sample(logits, *_rows(4, top_p=1e-6, seed=seed)), best)


def test_top_k_never_samples_outside_the_k_best():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1))
    allowed = set(logits[0].topk(5).indices.tolist())
    picks = {int(sample(logits, *_rows(1, top_k=5, seed=s))[0]) for s in range(200)}
    assert picks <= allowed and len(picks) > 1


def test_a_row_samples_the_same_whatever_its_batch_neighbours():
    logits = torch.randn(3, 64, generator=torch.Generator().manual_seed(2))
    seeds = torch.tensor([7, 8, 9])
    counters = torch.tensor([3, 3, 3])
    t, k, p, _, _ = _rows(3)
    batched = sample(logits, t, k, p, seeds, counters)
    for i in range(3):
        alone = sample(
            logits[i : i + 1], t[:1], k[:1], p[:1], seeds[i : i + 1], counters[i : i + 1]
        )
        assert alone.item() == batched[i].item()


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1])
    logits = probs.log()[None].expand(4000, 3)
    temperature, top_k, top_p, _, _ = _rows(4000)
    seeds = torch.arange(4000)  # 4000 independent draws
    draws = sample(logits, temperature, top_k, top_p, seeds, torch.zeros(4000, dtype=torch.int64))
    counts = torch.bincount(draws, minlength=3)
    assert torch.allclose(counts.float() / 4000, probs, atol=0.03)


def test_first_code_logits_apply_penalty_suppression_and_min_length():
    logits = torch.tensor([[2.0, -2.0, 1.0, 4.0]])
    seen = torch.tensor([[True, True, False, False]])
    suppressed = torch.tensor([False, False, False, True])
    eos_only = torch.tensor([False, False, True, False])
    out = first_code_logits(
        logits, seen, torch.tensor([2.0]), suppressed, eos_only, torch.tensor([True])
    )
    assert out[0, 0] == 1.0 and out[0, 1] == -4.0  # positive divided, negative multiplied
    assert out[0, 2] == float("-inf") and out[0, 3] == float("-inf")
    later = first_code_logits(
        logits, seen, torch.tensor([2.0]), suppressed, eos_only, torch.tensor([False])
    )
    assert later[0, 2] == 1.0
