"""The slot free-list both rates' streaming decoders keep their streams by."""

from __future__ import annotations

import pytest

from ttsfleet_runtime.speech_tokenizer.slots import SlotPool


def test_slots_are_handed_out_lowest_first_and_reused():
    pool = SlotPool(3, "codec")
    assert [pool.take(), pool.take()] == [0, 1]
    pool.give_back(0)
    assert pool.take() == 0
    assert pool.take() == 2
    assert pool.taken == 3


def test_a_full_pool_refuses_naming_its_decoder():
    pool = SlotPool(1, "25 Hz decoder")
    pool.take()
    with pytest.raises(RuntimeError, match="all 1 25 Hz decoder slots are in use"):
        pool.take()


def test_a_slot_given_back_twice_is_refused():
    pool = SlotPool(2, "codec")
    slot = pool.take()
    pool.give_back(slot)
    with pytest.raises(KeyError):
        pool.give_back(slot)
    assert [pool.take(), pool.take()] == [0, 1]  # the free list holds it once


def test_the_pool_says_whether_it_holds_slots():
    pool = SlotPool(3, "codec")
    a, b = pool.take(), pool.take()
    assert pool.holds([a, b]) and pool.holds([])
    pool.give_back(a)
    assert not pool.holds([a, b]) and not pool.holds([2])
