"""Builds the talker's input from a request, following the official prompt format.

The talker reads one embedding per position: a text embedding (projected to
the talker's width) plus a codec embedding. In streaming-text mode (the
reference's default, `non_streaming_mode=False`) the prefill is

    [instruction tokens]                      (VoiceDesign / styled CustomVoice)
    <|im_start|> assistant \\n                 (text only)
    tts_pad ... tts_pad tts_bos  +  codec prefix[:-1]
    first text token             +  codec_bos

with codec prefix = nothink think_bos think_eos (language "auto") or
think think_bos <language> think_eos, then the speaker (CustomVoice), then
codec_pad codec_bos. Every later frame adds the next text token (then
tts_eos, then tts_pad forever) to the sum of the previous frame's 16 code
embeddings.

A `VoicePrompt` is what a voice contributes; Base voice cloning will add a
speaker embedding and reference codes (in-context prompt) here, and the 25 Hz
tokenizer its own codec ids, without touching the engine.
"""

from __future__ import annotations

import dataclasses

import torch

from ..kernels.host_copy import ids_on
from .config import TTSConfig
from .talker import Talker
from .text_tokenizer import TextTokenizer

# Voices whose prompt part is kept (`PromptBuilder._voice_part`): every built-in
# speaker and language, and recent instructions.
VOICE_PARTS_KEPT = 256


class PromptError(ValueError):
    """The request cannot be turned into a prompt for this checkpoint; `param`
    names the request field at fault ("voice", "instructions", "language")."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclasses.dataclass(frozen=True)
class VoicePrompt:
    codec_prefix: tuple[int, ...]  # codec ids before the speaker
    speaker_id: int | None  # CustomVoice speaker as a codec id
    instruct_ids: tuple[int, ...]  # "<|im_start|>user\n{instructions}<|im_end|>\n", or empty


class PromptBuilder:
    def __init__(self, config: TTSConfig, tokenizer: TextTokenizer):
        self.config = config
        self.tokenizer = tokenizer
        self.role_ids = tokenizer.encode("<|im_start|>assistant\n")
        self._voice_parts: dict[VoicePrompt, tuple[Talker, torch.Tensor, torch.Tensor]] = {}
        if len(self.role_ids) != 3:
            raise PromptError(f"'<|im_start|>assistant\\n' must be 3 tokens, got {self.role_ids}")

    @property
    def speakers(self) -> tuple[str, ...]:
        return tuple(self.config.talker.spk_id)

    @property
    def languages(self) -> tuple[str, ...]:
        return ("auto",) + tuple(
            k for k in self.config.talker.codec_language_id if "dialect" not in k
        )

    @property
    def supports_instructions(self) -> bool:
        # The released 0.6B CustomVoice ignores instructions; VoiceDesign needs them.
        return self.config.tts_model_type == "voice_design" or (
            self.config.tts_model_type == "custom_voice" and self.config.tts_model_size != "0b6"
        )

    def voice(self, voice: str | None, instructions: str | None, language: str) -> VoicePrompt:
        t = self.config.talker
        kind = self.config.tts_model_type
        speaker_id = None
        if kind == "custom_voice":
            if not voice:
                raise PromptError(
                    f"a voice is required; this model has {', '.join(self.speakers)}", "voice"
                )
            if voice.lower() not in t.spk_id:
                raise PromptError(
                    f"unknown voice {voice!r}; this model has {', '.join(self.speakers)}", "voice"
                )
            speaker_id = t.spk_id[voice.lower()]
        elif kind == "voice_design":
            if voice:
                raise PromptError(
                    "a VoiceDesign model has no built-in voices; describe the voice in instructions",
                    "voice",
                )
            if not instructions:
                raise PromptError(
                    "a VoiceDesign model needs instructions describing the voice", "instructions"
                )
        else:
            raise PromptError(f"{kind} models (voice cloning) are not supported yet", "voice")

        lang = (language or "auto").lower()
        if lang != "auto" and lang not in t.codec_language_id:
            raise PromptError(
                f"unknown language {language!r}; supported: {', '.join(self.languages)}", "language"
            )
        language_id = None if lang == "auto" else t.codec_language_id[lang]
        if speaker_id is not None and lang in ("chinese", "auto"):
            dialect = t.spk_is_dialect.get(voice.lower(), False) if voice else False
            if dialect:
                language_id = t.codec_language_id[dialect]
        if language_id is None:
            prefix = (t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id)
        else:
            prefix = (t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id)

        instruct_ids: tuple[int, ...] = ()
        if instructions and self.supports_instructions:
            instruct_ids = tuple(
                self.tokenizer.encode(f"<|im_start|>user\n{instructions}<|im_end|>\n")
            )
        return VoicePrompt(codec_prefix=prefix, speaker_id=speaker_id, instruct_ids=instruct_ids)

    def text_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def codec_ids(self, voice: VoicePrompt) -> list[int]:
        """The codec side of the prompt: prefix, speaker, codec_pad, codec_bos."""
        t = self.config.talker
        ids = list(voice.codec_prefix)
        if voice.speaker_id is not None:
            ids.append(voice.speaker_id)
        return ids + [t.codec_pad_id, t.codec_bos_id]

    def prompt_length(self, voice: VoicePrompt) -> int:
        """Positions `prefill_embeds` makes for `voice`: instructions, role,
        the codec ids (the last one with the first text token)."""
        return len(voice.instruct_ids) + len(self.role_ids) + len(self.codec_ids(voice))

    @torch.no_grad()
    def prefill_embeds(
        self, talker: Talker, voice: VoicePrompt, first_text_id: int
    ) -> torch.Tensor:
        """The talker's prefill input [T, hidden] for a voice and the first text token."""
        head, codec_bos = self._voice_part(talker, voice)
        first = talker.text_hidden(ids_on([first_text_id], codec_bos.device)) + codec_bos
        return torch.cat([head, first], dim=0)

    def _voice_part(self, talker: Talker, voice: VoicePrompt) -> tuple[torch.Tensor, torch.Tensor]:
        """What a prompt owes to its voice alone: every position but the last
        [T - 1, hidden], and the last one's codec side (codec_bos) [1, hidden].
        Computed once per voice: building a prompt is on the engine thread's
        path to first audio, and these are a dozen small device calls."""
        kept = self._voice_parts.get(voice)
        if kept is not None and kept[0] is talker:
            return kept[1], kept[2]
        device = talker.codec_embedding.device
        ids = lambda xs: ids_on(xs, device)  # noqa: E731
        codec_ids = self.codec_ids(voice)
        codec = talker.codec_hidden(ids(codec_ids))
        c = self.config
        tts_bos, tts_pad = talker.text_hidden(ids([c.tts_bos_token_id, c.tts_pad_token_id]))
        n = len(codec_ids)
        text_side = torch.cat([tts_pad.expand(n - 2, -1), tts_bos[None]], dim=0)
        parts = []
        if voice.instruct_ids:
            parts.append(talker.text_hidden(ids(voice.instruct_ids)))
        parts.append(talker.text_hidden(ids(self.role_ids)))
        parts.append(text_side + codec[:-1])
        if len(self._voice_parts) >= VOICE_PARTS_KEPT:  # instructions make voices unbounded
            self._voice_parts.clear()
        head, codec_bos = torch.cat(parts, dim=0), codec[-1:]
        self._voice_parts[voice] = (talker, head, codec_bos)
        return head, codec_bos
