"""TextIntake: a running request's text, as it arrives, into its row of the runner.

The prompt of a piece takes the first text ids (prefill_rows.py); the rest trail, one
per decode step (Qwen3-TTS's dual track: frame f adds trailing text id f). A streamed
text grows while its audio plays, so before each step the engine thread hands the
runner what arrived since (`take`), for every sequence in one call
(`ModelRunner.set_texts`: a call per sequence cost ~8 torch calls each), and tells the
scheduler how far each row's text now reaches (`Scheduler.text_handed`), which decides
the frames the row may step to. Engine thread only, under the core's lock.

A failure fails only the sequence that causes it: text that is not valid Unicode, a
streamed utterance longer than one prompt allows, a feed that raised, or a runner call
that fails with it (a failed batched call is retried one sequence at a time).
"""

from __future__ import annotations

from ..model.prompt import PromptBuilder
from ..model.text_tokenizer import InvalidText
from .api import InvalidRequest
from .isolation import together_else_alone
from .scheduler import Scheduler, end_with_error
from .sequence import Sequence, Status


class TextIntake:
    def __init__(
        self, scheduler: Scheduler[Sequence], builder: PromptBuilder, max_text_tokens: int
    ):
        self.scheduler = scheduler
        self.builder = builder
        self.max_text_tokens = max_text_tokens

    def take(self, runner, seqs: list[Sequence]) -> None:
        """Hand `runner` the newly arrived trailing text ids of `seqs`."""
        taken: list[tuple[Sequence, list[int], bool]] = []
        for seq in seqs:
            try:
                new = self._new_ids(seq)
            except InvalidText as exc:  # a streamed delta that is not valid Unicode
                self.scheduler.finish(seq, "error", InvalidRequest(str(exc), param="text"))
            except Exception as exc:
                self.failed(seq, exc)
            else:
                if new is None:
                    continue
                if new:
                    taken.append((seq, new, seq.text.closed))
                else:  # nothing new; the text may have ended with nothing left
                    self.scheduler.text_handed(seq, 0, seq.text.closed)
        handed = together_else_alone(
            taken,
            lambda some: runner.set_texts([(seq.slot, new, seq.text_sent) for seq, new, _ in some]),
            lambda item, exc: self.failed(item[0], exc),
            "storing the text of several requests",
        )
        for seq, new, final in handed:
            self.scheduler.text_handed(seq, len(new), final)

    def failed(self, seq: Sequence, exc: Exception) -> None:
        end_with_error(self.scheduler, seq, "reading the text failed", exc)

    def _new_ids(self, seq: Sequence) -> list[int] | None:
        """`seq`'s trailing text ids not in the runner yet; None when it takes none now
        (not running, its text already final, or ended here)."""
        if seq.text.refresh() and seq.text.error is not None:
            self.scheduler.finish(seq, "error")
            return None
        if seq.finished:
            return None
        if len(seq.text.ids) > self.max_text_tokens:
            # Only a streamed text can get here: a whole one is split to fit.
            self.scheduler.finish(
                seq,
                "error",
                InvalidRequest(
                    f"a streamed utterance may hold at most {self.max_text_tokens} text tokens; "
                    "end the utterance (flush) before sending more text",
                    param="text",
                ),
            )
            return None
        if (
            seq.slot is None
            or seq.status is not Status.RUNNING
            or seq.awaiting_prefill
            or seq.text_final
        ):
            return None
        stream = self.builder.text_stream(seq.voice, seq.text.ids, seq.text.closed)
        trailing = stream[seq.voice.prompt_text_ids :]  # what the prompt did not take
        return trailing[seq.text_sent :]
