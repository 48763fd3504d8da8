"""A streamed text's ids as its deltas arrive (TextFeed, engine/sequence.py): the same
ids and character spans as the whole text's, and per delta only the newly completed
words are tokenised, on the engine thread (issue 36: re-tokenising everything so far at
every delta made an utterance's text O(length^2) work under the core's lock)."""

from __future__ import annotations

import pytest

from ttsfleet_runtime.engine.sequence import TextFeed
from ttsfleet_runtime.model.text_tokenizer import TextTokenizer

TEXTS = (
    "Your order has shipped and should arrive on Thursday afternoon. Turn left at the "
    "next intersection, then keep right for two miles.",
    "It's 3.14 -- isn't it?  Double  spaces, tabs\tand\nnew lines\n\nhere: (quoted) "
    '"words" don\'t vanish; 1,234,567 numbers & symbols #1!',
    "Les élèves ont été très enthousiastes. 今天天气很好，我们去公园吧。 Ещё одна фраза.",
    "cafe\u0301 re\u0301sume\u0301 combining marks after letters and a lone \u0301 mark",
)


@pytest.fixture(scope="module")
def tokenizer(tiny_checkpoint) -> TextTokenizer:
    return TextTokenizer.from_checkpoint(tiny_checkpoint)


class Counting:
    """A tokenizer's calls, counted in characters tokenised."""

    def __init__(self, tokenizer: TextTokenizer):
        self.tokenizer = tokenizer
        self.chars = 0
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.chars += len(text)
        self.calls += 1
        return self.tokenizer.encode(text)

    def encode_offsets(self, text: str):
        self.chars += len(text)
        self.calls += 1
        return self.tokenizer.encode_offsets(text)


def stream(feed: TextFeed, text: str, size: int) -> None:
    """Feed `text` in deltas of `size` characters, refreshing after each (as the engine
    thread does before a step), then close it."""
    for i in range(0, len(text), size):
        feed.feed(text[i : i + size])
        feed.refresh()
    feed.close()
    feed.refresh()


@pytest.mark.parametrize("size", [1, 4, 7, 40])
@pytest.mark.parametrize("text", TEXTS)
def test_deltas_give_the_whole_texts_ids_and_spans(tokenizer, text, size):
    feed = TextFeed(tokenizer.encode, encode_offsets=tokenizer.encode_offsets)
    stream(feed, text, size)
    ids, offsets = tokenizer.encode_offsets(text)
    assert feed.ids == ids
    assert feed.offsets == offsets
    assert feed.committed == text


def test_ids_committed_along_the_way_are_the_whole_texts_prefix(tokenizer):
    text = TEXTS[0]
    whole = tokenizer.encode(text)
    feed = TextFeed(tokenizer.encode)
    for i in range(0, len(text), 4):
        feed.feed(text[i : i + 4])
        feed.refresh()
        assert feed.ids == whole[: len(feed.ids)]  # a committed id never changes


def test_an_utterance_is_tokenised_about_once_not_once_per_delta(tokenizer):
    text = TEXTS[0]  # 148 characters, 37 deltas of 4
    counting = Counting(tokenizer)
    feed = TextFeed(counting.encode, encode_offsets=counting.encode_offsets)
    stream(feed, text, 4)
    assert feed.ids == tokenizer.encode(text)
    # Each completed word once (with its leading space); the whole text so far at
    # every delta was ~2,800 characters for this one.
    assert counting.chars <= len(text) + 4


def test_a_delta_that_completes_no_word_tokenises_nothing(tokenizer):
    counting = Counting(tokenizer)
    feed = TextFeed(counting.encode)
    feed.feed("Hello wor")
    assert feed.refresh()  # "Hello" is complete
    calls = counting.calls
    feed.feed("ld")  # "world" may still go on: nothing new to commit
    assert not feed.refresh()
    assert counting.calls == calls
