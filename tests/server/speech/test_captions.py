"""Captions from timed words: cues of at most two 42-character lines and 7 seconds,
cut after a sentence, in SRT and WebVTT."""

from __future__ import annotations

from ttsfleet_runtime.engine.api import TimedWord
from ttsfleet_runtime.server import captions


def words_at(text: str, seconds_each: float) -> list[TimedWord]:
    out = []
    for i, word in enumerate(text.split()):
        start, end = i * seconds_each, (i + 1) * seconds_each
        out.append(TimedWord(word, start, end, 0, " " if i else "", ((len(word), start, end),)))
    return out


def test_a_sentence_end_closes_the_cue():
    cues = captions.cues(words_at("One two. Three four!", 0.5))
    assert [c.lines for c in cues] == [("One two.",), ("Three four!",)]
    assert [(c.start_s, c.end_s) for c in cues] == [(0.0, 1.0), (1.0, 2.0)]


def test_long_text_breaks_into_two_lines_then_a_new_cue():
    text = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november"
    cues = captions.cues(words_at(text, 0.2))
    for cue in cues:
        assert 1 <= len(cue.lines) <= 2
        assert all(len(line) <= 42 for line in cue.lines)
    assert " ".join(" ".join(c.lines) for c in cues) == text
    assert len(cues) == 2 and len(cues[0].lines) == 2


def test_a_cue_lasts_at_most_seven_seconds():
    cues = captions.cues(words_at("slow words said one by one and far apart", 2.0))
    assert all(c.end_s - c.start_s <= 7.0 for c in cues)
    assert [len(" ".join(c.lines).split()) for c in cues] == [3, 3, 3]


def test_srt_and_vtt_spell_the_times_their_way():
    late = [  # past the hour
        TimedWord("Hi", 3725.5, 3726.0, 0, "", ((2, 3725.5, 3726.0),)),
        TimedWord("there.", 3726.0, 3727.25, 2, " ", ((6, 3726.0, 3727.25),)),
    ]
    cues = captions.cues(late)
    assert captions.srt(cues) == "1\n01:02:05,500 --> 01:02:07,250\nHi there.\n"
    assert captions.vtt(cues) == "WEBVTT\n\n01:02:05.500 --> 01:02:07.250\nHi there.\n"
    assert captions.vtt([]) == "WEBVTT\n\n" and captions.srt([]) == ""
