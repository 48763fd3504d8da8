"""What the load test speaks: a built-in mix of English texts of about a given length of
speech, or the user's own texts (a file of one text a line, or JSON lines)."""

from __future__ import annotations

import json
from pathlib import Path

# Conversational English is spoken at about 150 words a minute.
WORDS_PER_SECOND = 2.5

SENTENCES = (
    "Your order has shipped and should arrive on Thursday afternoon.",
    "Turn left at the next intersection, then keep right for two miles.",
    "The meeting has been moved to half past three in the small conference room.",
    "I found three restaurants nearby that are still open.",
    "Please hold while I transfer you to the billing department.",
    "Tomorrow will be cloudy with a chance of light rain in the evening.",
    "Your balance is forty two dollars and seventeen cents.",
    "The next train to the airport leaves from platform six in eight minutes.",
    "Sure, I can help you reset your password right now.",
    "Chapter four begins on a cold morning at the edge of the harbour.",
    "Remember to take the medication with food, twice a day.",
    "The quarterly report shows steady growth across every region.",
    "Would you like me to read the last message again?",
    "Add two cups of flour and stir until the batter is smooth.",
    "Your appointment with doctor Patel is confirmed for Monday at nine.",
    "The museum is open every day except Tuesday, from ten until six.",
    "I could not find that song, but here is something similar.",
    "Traffic is heavy on the bridge, so the drive will take about forty minutes.",
    "Thanks for calling, and have a wonderful rest of your day.",
    "The package was left at the front desk of your building.",
    "Set a timer for twelve minutes and check the oven then.",
    "Our support team usually replies within one business day.",
    "The flight is on time and boarding starts at gate twenty one.",
    "Here is a quick summary of the news from this morning.",
)


def builtin_texts(seconds: float, count: int = len(SENTENCES)) -> list[str]:
    """`count` texts of about `seconds` of speech each, every one starting at a different
    sentence of the built-in mix (so prompts differ, as real traffic's do)."""
    target = max(1, round(seconds * WORDS_PER_SECOND))
    texts = []
    for start in range(count):
        words: list[str] = []
        k = start
        while len(words) < target:
            words += SENTENCES[k % len(SENTENCES)].split()
            k += 1
        if len(words) > target * 1.25:  # cut a long last sentence at the target length
            words = words[:target]
            words[-1] = words[-1].rstrip(",.?!") + "."
        texts.append(" ".join(words))
    return texts


def load_texts(path: Path) -> list[str]:
    """Texts from a file: one a line, or JSON lines with an `input` or `text` field;
    blank lines are skipped."""
    texts = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                record = json.loads(line)
                text = record.get("input", record.get("text"))
            except (ValueError, AttributeError):
                text = None
            if not isinstance(text, str) or not text.strip():
                raise ValueError(f"{path}:{number}: a JSON line needs a string 'input' or 'text'")
            line = text.strip()
        texts.append(line)
    if not texts:
        raise ValueError(f"{path}: no texts")
    return texts
