"""What a packed prefill takes in: each prompt (`Prompt`: its slot, its input, the
request's `SlotParams`) and the per-prompt rows its CUDA graph reads (`prefill_ints`,
`prefill_floats` of `ModelRunner`): their names, where they lie in the one int64 buffer
a call writes, and a prompt's values for them, built on the host in numpy."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

# Prompts one packed prefill takes: the rows its graph samples and commits
# (unused rows write a scratch state row). 64: a burst as large as the default
# server's whole batch (--max-batch 64) is prefilled in one call; sampling 64
# rows instead of a few costs next to nothing beside the prompts' positions.
PREFILL_PROMPTS = 64


@dataclasses.dataclass(frozen=True)
class SlotParams:
    """A request's sampling parameters, as the runner needs them."""

    temperature: float
    top_k: int
    top_p: float
    repetition_penalty: float
    subtalker_temperature: float
    subtalker_top_k: int
    subtalker_top_p: float
    seed: int
    min_frames: int


@dataclasses.dataclass(frozen=True)
class Prompt:
    """One prompt of a packed prefill: its slot, its input [T, hidden] and the
    request's sampling parameters."""

    slot: int
    embeds: torch.Tensor
    params: SlotParams


# The packed prefill's per-prompt rows (`prefill_ints`, `prefill_floats`).
# A prompt's sampling parameters, each also a SlotState field the prefill commits.
SAMPLING_INTS = ("top_k", "sub_top_k", "seed", "min_frames")
PROMPT_INTS = ("last", "slot", "length", *SAMPLING_INTS)
PROMPT_FLOATS = (
    "temperature",
    "top_p",
    "repetition_penalty",
    "sub_temperature",
    "sub_top_p",
)


# Where they lie in `prefill_inputs` (int64): the ints, then the floats two to an int64.
INTS_END = len(PROMPT_INTS) * PREFILL_PROMPTS
ROWS_END = INTS_END + len(PROMPT_FLOATS) * PREFILL_PROMPTS // 2


def prompt_row_views(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ints [len(PROMPT_INTS), N] and floats [len(PROMPT_FLOATS), N] of the
    host side of `prefill_inputs`' prompt rows (int64 [ROWS_END]), as views."""
    ints = rows[:INTS_END].reshape(len(PROMPT_INTS), PREFILL_PROMPTS)
    floats = rows[INTS_END:ROWS_END].view(np.float32)
    return ints, floats.reshape(len(PROMPT_FLOATS), PREFILL_PROMPTS)


def prompt_ints(prompt: Prompt, last: int, length: int) -> list[int]:
    q = prompt.params
    # The reference never ends before 2 frames (min_new_tokens=2).
    row = dict(
        last=last,
        slot=prompt.slot,
        length=length,
        top_k=q.top_k,
        sub_top_k=q.subtalker_top_k,
        seed=q.seed,
        min_frames=max(2, q.min_frames),
    )
    return [row[name] for name in PROMPT_INTS]


def prompt_floats(q: SlotParams) -> list[float]:
    row = dict(
        temperature=q.temperature,
        top_p=q.top_p,
        repetition_penalty=q.repetition_penalty,
        sub_temperature=q.subtalker_temperature,
        sub_top_p=q.subtalker_top_p,
    )
    return [row[name] for name in PROMPT_FLOATS]
