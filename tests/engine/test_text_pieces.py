"""Long text is cut where a speaker pauses: sentences, then clauses, then
spaces, then (only for unbroken runs) characters; pieces fit and keep order."""

from __future__ import annotations

import re

import pytest

from ttsfleet_runtime.engine.text_pieces import split_text


def words(text: str) -> int:
    """A token counter for tests: one token per word or CJK character."""
    return len(
        re.findall(
            r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]|[^\s\u3040-\u30ff\u3400-\u9fff]+", text
        )
    )


def chars(text: str) -> int:
    return len(text)


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_text_that_fits_is_one_piece_exactly_as_given():
    assert split_text("  Hello there.  ", words, 10) == ["  Hello there.  "]


def test_empty_text_has_no_pieces():
    assert split_text(" \n ", words, 10) == []


def test_sentences_are_packed_while_they_fit():
    text = "One two three. Four five. Six seven eight nine. Ten."
    assert split_text(text, words, 5) == ["One two three. Four five.", "Six seven eight nine. Ten."]


def test_question_and_exclamation_marks_and_closing_quotes_end_sentences():
    text = 'He asked "why not?" She said: no! Then they left.'
    assert split_text(text, words, 4) == ['He asked "why not?"', "She said: no!", "Then they left."]


def test_a_decimal_point_does_not_end_a_sentence():
    text = "Pi is 3.14 or so. That is all."
    assert split_text(text, words, 5) == ["Pi is 3.14 or so.", "That is all."]


def test_a_sentence_too_long_is_cut_at_clause_marks():
    text = "First a long clause here, then another clause there; and a last one."
    assert split_text(text, words, 5) == [
        "First a long clause here,",
        "then another clause there;",
        "and a last one.",
    ]


def test_a_clause_too_long_is_cut_at_spaces():
    assert split_text("a " * 11, words, 4) == ["a a a a", "a a a a", "a a a"]


def test_an_unbroken_run_is_cut_between_characters():
    assert split_text("x" * 10, chars, 4) == ["xxxx", "xxxx", "xx"]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("今天天气很好。我们去公园吧！你来吗？", ["今天天气很好。", "我们去公园吧！", "你来吗？"]),
        ("東京は晴れです。大阪は雨です。", ["東京は晴れです。", "大阪は雨です。"]),
        ("「行こう。」と彼は言った。", ["「行こう。」", "と彼は言った。"]),
    ],
)
def test_full_width_sentence_marks_end_sentences_without_spaces(text, expected):
    assert split_text(text, words, 8) == expected


def test_full_width_clause_marks_cut_a_long_chinese_sentence():
    text = "我们今天去公园，然后去商店，最后回家。"
    assert split_text(text, words, 8) == ["我们今天去公园，", "然后去商店，", "最后回家。"]


def test_korean_uses_latin_marks():
    text = "안녕하세요. 반갑습니다. 좋은 하루 되세요."
    assert split_text(text, chars, 12) == ["안녕하세요.", "반갑습니다.", "좋은 하루 되세요."]


def test_line_breaks_end_sentences():
    assert split_text("Title\nBody text here", words, 3) == ["Title", "Body text here"]


def test_pieces_fit_keep_every_character_and_their_order():
    prose = (
        "The engine speaks long text in pieces, each short enough for one prompt. "
        "Every piece starts where the last one stopped! Does the listener hear a seam? "
        "Hardly: the codec state runs on, frame after frame. 文字也一样，一句接一句。"
    ) * 7
    pieces = split_text(prose, words, 17)
    assert all(words(p) <= 17 for p in pieces)
    assert squeeze("".join(pieces)) == squeeze(prose)
    assert len(pieces) > 7


def test_with_the_real_tokenizer_4000_characters_fit_in_pieces(tiny_checkpoint):
    from ttsfleet_runtime.model.text_tokenizer import TextTokenizer

    tokenizer = TextTokenizer.from_checkpoint(tiny_checkpoint)
    count = lambda t: len(tokenizer.encode(t))  # noqa: E731
    prose = (
        "Good morning. How are you today? The quick brown fox jumps over the lazy dog, "
        "and the streaming engine keeps every listener waiting no longer than it must. "
    ) * 25
    pieces = split_text(prose[:4000], count, 256)
    assert count(prose[:4000]) > 256 and len(pieces) > 1
    assert all(count(p) <= 256 for p in pieces)
    assert squeeze("".join(pieces)) == squeeze(prose[:4000])


@pytest.mark.parametrize(
    "text, count, most",
    [
        ("The engine speaks long text in pieces, one after another. " * 70, words, 3),
        ("word " * 800, words, 3),
        ("word " * 800, chars, 10),  # an estimate 25 % low: parts are given back by bisection
        ("x" * 4000, chars, 16),  # no boundary at all: a search over characters
    ],
)
def test_splitting_cost_grows_with_the_text_not_with_its_parts(text, count, most):
    """It runs on the server's event loop at admission: no counting of every
    candidate piece (which tokenised 4,096 characters many times over)."""
    tokenised = []

    def counting(t: str) -> int:
        tokenised.append(len(t))
        return count(t) if count is words else count(t) // 4

    pieces = split_text(text, counting, 64)
    assert sum(tokenised) <= most * len(text)
    assert len(pieces) > 4 and all(counting(p) <= 64 for p in pieces)
