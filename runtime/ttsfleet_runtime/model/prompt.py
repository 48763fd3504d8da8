"""Builds the talker's input from a request, following the official prompt format.

The talker reads one embedding per position: a text embedding (projected to
the talker's width) plus a codec embedding. In streaming-text mode (the
reference's default, `non_streaming_mode=False`) the prefill is

    [instruction tokens]                      (VoiceDesign / styled CustomVoice)
    <|im_start|> assistant \\n                 (text only)
    tts_pad ... tts_pad tts_bos  +  codec prefix[:-1]
    first text token             +  codec_bos

with codec prefix = nothink think_bos think_eos (language "auto") or
think think_bos <language> think_eos, then the speaker, then codec_pad
codec_bos. Every later frame adds the next text token (then tts_eos, then
tts_pad forever) to the sum of the previous frame's 16 code embeddings (one
code at 25 Hz).

The speaker is a codec id (CustomVoice), nothing (VoiceDesign), or, on a
Base model, a cloned voice's speaker embedding put in that position as it is
(qwen-tts' `voice_clone_prompt`). A Base model clones *in context* when the
voice also has reference codes and their transcript (`generate_icl_prompt`):
the text side then reads the transcript before the text, and the codec side
after codec_bos reads the reference's frames, each the sum of its 16 code
embeddings (a 25 Hz frame is one code: its embedding; its reference codes are
[frames]), so the model continues the recording:

    ref text + text + tts_eos, tts_pad ...   +  codec_bos, ref frame 1 .. ref frame R

position by position; text beyond these R + 1 positions follows one token a
frame as above, and text shorter than them is padded with tts_pad (then every
frame reads tts_pad). Both cases are one rule: the text side is a stream of
ids (transcript, text, tts_eos) of which the prompt takes the first
`VoicePrompt.prompt_text_ids` (1 without a reference) and the decode steps
the rest. The reference's waveform is its codes decoded with the generated
ones and cut where the generated ones start; the engine's streaming codec
gets the same by decoding the reference codes into the stream's codec state
first (engine/codec_worker.py, `CodecWorker.prime`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

import numpy as np
import torch

from ..transfers import ids_on, to_device
from .config import TTSConfig
from .text_tokenizer import TextTokenizer

if TYPE_CHECKING:
    from .talker import Talker
    from .weights import LoadedModel

# Voices whose prompt part is kept (`PromptBuilder._voice_part`): every built-in
# speaker and language, and recent instructions.
VOICE_PARTS_KEPT = 256
# The 25 Hz decoder encodes a cloned voice's reference mel (100 frames a second)
# for each stream that speaks it, in the codec's batch, so its length costs every
# stream of that batch. The voice encoders take recordings up to 120 s
# (engine/voice_encoders.py MAX_SECONDS), 12,000 frames: a stored voice with more was
# not made from a recording they took (a stored 30,000 slowed its batch by ~30%).
MAX_REF_MEL_FRAMES = 12_000


class PromptError(ValueError):
    """The request cannot be turned into a prompt for this checkpoint; `param`
    names the request field at fault ("voice", "cloned_voice", "instructions",
    "language")."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


class ReferenceTranscriptError(PromptError):
    """A cloned voice's transcript cannot be its recording's (at upload: the
    transcript's fault, not the audio's)."""


class ClonedVoiceLike(Protocol):
    """What a Base prompt reads of a cloned voice (engine/api.py's `ClonedVoice`;
    the model layer does not import the engine's)."""

    speaker_embedding: np.ndarray
    ref_codes: np.ndarray | None
    ref_text: str | None
    model: str
    xvector: np.ndarray | None
    ref_mel: np.ndarray | None


@dataclasses.dataclass(frozen=True, eq=False)
class VoicePrompt:
    codec_prefix: tuple[int, ...]  # codec ids before the speaker
    speaker_id: int | None  # CustomVoice speaker as a codec id
    instruct_ids: tuple[int, ...]  # "<|im_start|>user\n{instructions}<|im_end|>\n", or empty
    speaker_embedding: torch.Tensor | None = None  # Base: float32 [hidden] in the speaker place
    ref_text_ids: tuple[int, ...] = ()  # in-context cloning: the reference transcript
    ref_codes: torch.Tensor | None = None  # in-context cloning: int64 [frames, code groups]
    # The 25 Hz decoder's conditioning of a cloned voice: its x-vector float32 [192]
    # and reference mel float32 [frames, 80]; None: the decoder's unconditioned input
    # (built-in speakers, and every 12 Hz voice).
    decoder_xvector: torch.Tensor | None = None
    decoder_ref_mel: torch.Tensor | None = None

    @property
    def prompt_text_ids(self) -> int:
        """How many ids of the text stream (transcript, text, tts_eos) the
        prompt takes: one per position from codec_bos on."""
        return 1 + (0 if self.ref_codes is None else self.ref_codes.shape[0])


class PromptBuilder:
    def __init__(self, config: TTSConfig, tokenizer: TextTokenizer, served_name: str = ""):
        """`served_name`: the model's served name (`ModelInfo.name`); a cloned
        voice computed for another name is refused."""
        self.config = config
        self.tokenizer = tokenizer
        self.served_name = served_name
        self.role_ids = tokenizer.encode("<|im_start|>assistant\n")
        # (codec ids, instruct ids) -> (talker, head, codec side from codec_bos on)
        self._voice_parts: dict[
            tuple[tuple[int, ...], tuple[int, ...]], tuple[Talker, torch.Tensor, torch.Tensor]
        ] = {}
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

    @property
    def supports_voice_clone(self) -> bool:
        return self.config.tts_model_type == "base"

    def voice(
        self,
        voice: str | None,
        instructions: str | None,
        language: str,
        cloned: ClonedVoiceLike | None = None,
    ) -> VoicePrompt:
        t = self.config.talker
        kind = self.config.tts_model_type
        speaker_id = None
        if cloned is not None and kind != "base":
            raise PromptError(
                f"this {kind} model cannot speak cloned voices: that takes a Base model",
                "cloned_voice",
            )
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
        elif kind == "base":
            if cloned is None:
                raise PromptError(
                    "a Base model speaks cloned voices only: name a stored voice or send "
                    "a reference recording",
                    "voice",
                )
        else:
            raise PromptError(f"{kind} models are not supported", "voice")

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

        if cloned is not None:
            # qwen-tts' generate_voice_clone takes no instructions.
            return self._cloned(prefix, cloned)
        instruct_ids: tuple[int, ...] = ()
        if instructions and self.supports_instructions:
            instruct_ids = tuple(
                self.tokenizer.encode(f"<|im_start|>user\n{instructions}<|im_end|>\n")
            )
        return VoicePrompt(codec_prefix=prefix, speaker_id=speaker_id, instruct_ids=instruct_ids)

    def _cloned(self, prefix: tuple[int, ...], cloned: ClonedVoiceLike) -> VoicePrompt:
        """A Base voice from a cloned voice, checked against this checkpoint."""
        if cloned.model and self.served_name and cloned.model != self.served_name:
            raise PromptError(
                f"this voice was cloned for {cloned.model!r}, not for {self.served_name!r}: "
                "a speaker embedding belongs to the model that computed it; clone it again "
                "for this model",
                "cloned_voice",
            )
        hidden = self.config.talker.hidden_size
        embedding = np.asarray(cloned.speaker_embedding)
        if embedding.shape != (hidden,) or not np.isfinite(embedding).all():
            raise PromptError(
                f"the speaker embedding must be {hidden} finite numbers for this model, "
                f"got shape {embedding.shape}",
                "cloned_voice",
            )
        speaker = torch.from_numpy(embedding.astype(np.float32))
        voice = VoicePrompt(
            prefix, None, (), speaker_embedding=speaker, **self._decoder_part(cloned)
        )
        if cloned.ref_codes is None:
            return voice
        codes = self._reference_codes(np.asarray(cloned.ref_codes))
        if not cloned.ref_text:
            raise PromptError(
                "in-context cloning needs the reference recording's transcript", "cloned_voice"
            )
        ref_text_ids = tuple(self.tokenizer.encode(cloned.ref_text))
        if len(ref_text_ids) > codes.shape[0]:
            # More tokens than frames (12.5 or 25 a second): not this recording's
            # transcript. (Its tokens beyond the prompt would also take the text's room.)
            raise ReferenceTranscriptError(
                f"the reference transcript has {len(ref_text_ids)} tokens for "
                f"{codes.shape[0]} frames of audio, more than anyone speaks: is it the "
                "recording's transcript?",
                "cloned_voice",
            )
        return dataclasses.replace(
            voice, ref_text_ids=ref_text_ids, ref_codes=torch.from_numpy(codes.astype(np.int64))
        )

    def _reference_codes(self, codes: np.ndarray) -> np.ndarray:
        """A cloned voice's reference codes as [frames, groups], checked: [frames, 16]
        at 12 Hz, [frames] (one codebook) at 25 Hz."""
        groups, codebook = self.config.num_code_groups, self.config.codebook_size
        shape = "[frames >= 1]" if groups == 1 else f"[frames >= 1, {groups}]"
        if groups == 1 and codes.ndim == 1:
            codes = codes[:, None]
        if codes.ndim != 2 or codes.shape[0] < 1 or codes.shape[1] != groups:
            raise PromptError(
                f"reference codes must be {shape}, got shape {codes.shape}", "cloned_voice"
            )
        if not np.issubdtype(codes.dtype, np.integer) or codes.min() < 0 or codes.max() >= codebook:
            raise PromptError(
                f"reference codes must be integers in [0, {codebook})", "cloned_voice"
            )
        return codes

    def _decoder_part(self, cloned: ClonedVoiceLike) -> dict[str, torch.Tensor]:
        """The 25 Hz decoder's conditioning of `cloned` (none for a 12 Hz model)."""
        if self.config.tokenizer_rate_hz != 25:
            return {}
        if cloned.xvector is None or cloned.ref_mel is None:
            raise PromptError(
                "this voice has no decoder conditioning (x-vector and reference mel): "
                "clone it again for this model",
                "cloned_voice",
            )
        xvector, ref_mel = np.asarray(cloned.xvector), np.asarray(cloned.ref_mel)
        finite = np.isfinite(xvector).all() and np.isfinite(ref_mel).all()
        frames_ok = ref_mel.ndim == 2 and 1 <= len(ref_mel) <= MAX_REF_MEL_FRAMES
        if xvector.ndim != 1 or not frames_ok or not finite:
            raise PromptError(
                f"the decoder conditioning must be a finite x-vector [dim] and reference mel "
                f"[1 to {MAX_REF_MEL_FRAMES} frames, mels], got shapes {xvector.shape} and "
                f"{ref_mel.shape}: clone the voice again from a recording of at most 120 s",
                "cloned_voice",
            )
        return dict(
            decoder_xvector=torch.from_numpy(xvector.astype(np.float32)),
            decoder_ref_mel=torch.from_numpy(ref_mel.astype(np.float32)),
        )

    def text_ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def text_stream(self, voice: VoicePrompt, ids: list[int], closed: bool) -> list[int]:
        """The text side's ids in order: the reference transcript (in-context
        cloning), the text's ids so far, tts_eos once the text is complete. The
        prompt takes the first `voice.prompt_text_ids`, the decode steps the rest."""
        eos = [self.config.tts_eos_token_id] if closed else []
        return list(voice.ref_text_ids) + list(ids) + eos

    def codec_ids(self, voice: VoicePrompt) -> list[int]:
        """The codec ids up to codec_bos: prefix, [speaker id], codec_pad, codec_bos
        (a speaker embedding takes a position between prefix and codec_pad)."""
        t = self.config.talker
        ids = list(voice.codec_prefix)
        if voice.speaker_id is not None:
            ids.append(voice.speaker_id)
        return ids + [t.codec_pad_id, t.codec_bos_id]

    def prompt_length(self, voice: VoicePrompt) -> int:
        """Positions `prefill_embeds` makes for `voice`: instructions, role, the
        codec side before codec_bos, then one per text-stream id the prompt takes."""
        speaker_embedding = voice.speaker_embedding is not None
        before_bos = len(self.codec_ids(voice)) - 1 + speaker_embedding
        return len(voice.instruct_ids) + len(self.role_ids) + before_bos + voice.prompt_text_ids

    def check_fits(self, voice: VoicePrompt, limit: int, frame_rate_hz: float) -> int:
        """The prompt's positions; PromptError naming what to shorten when a
        prefill cannot take them (`limit`: the runner's longest prompt;
        `frame_rate_hz`: the speech tokenizer's frames a second)."""
        length = self.prompt_length(voice)
        if length <= limit:
            return length
        over = length - limit
        if voice.ref_codes is not None:
            frames = voice.ref_codes.shape[0]
            raise PromptError(
                f"the reference recording is too long: the prompt would take {length} positions "
                f"({frames} of them its frames), this server takes at most {limit}; use a "
                f"recording shorter by {over / frame_rate_hz:.1f} s or more",
                "cloned_voice",
            )
        raise PromptError(
            f"instructions are too long: the prompt would take {length} positions, "
            f"this server takes at most {limit}; shorten the instructions by "
            f"{over} tokens or more",
            "instructions",
        )

    def prefill_embeds(
        self, model: LoadedModel, voice: VoicePrompt, lead: list[int]
    ) -> torch.Tensor:
        """The talker's prefill input [T, hidden] for a voice and `lead`, the first
        ids of its text stream (`text_stream`): `voice.prompt_text_ids` of them, or
        fewer when the text is complete and shorter (padded with tts_pad).

        This runs on the engine thread for every prompt, and each torch call there
        hands the interpreter lock over (bench/torch_calls.py at 7d79071): it makes six. No
        `no_grad` around it (two calls; the weights need no gradient), and a lead of
        one id (every voice without a reference) is its row of the embedding table,
        cloned as the embedding lookup would make it: no copy of the id to the device
        (five calls)."""
        width = voice.prompt_text_ids
        if not 1 <= len(lead) <= width:
            raise ValueError(f"the prompt takes 1 to {width} text ids, got {len(lead)}")
        head, after_bos = self._voice_part(model, voice)
        talker = model.talker
        if width == 1:
            (i,) = lead
            if not 0 <= i < talker.text_embedding.shape[0]:
                raise IndexError(f"text id {i} out of range")
            text = talker.project_text(talker.text_embedding[i : i + 1].clone())
        else:
            lead_ids = list(lead) + [self.config.tts_pad_token_id] * (width - len(lead))
            text = talker.text_hidden(ids_on(lead_ids, after_bos.device))
        return torch.cat([head, text + after_bos], dim=0)

    def _voice_part(
        self, model: LoadedModel, voice: VoicePrompt
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """What a prompt owes to its voice alone: every position before codec_bos
        [T - width, hidden], and the codec side from codec_bos on [width, hidden]
        (codec_bos, then the reference's frames). Building a prompt is on the
        engine thread's path to first audio, and these are a dozen small device
        calls: a voice without a speaker embedding (built-in speakers, languages,
        instructions) is computed once, kept under its codec and instruction ids.
        A cloned voice is computed for each prompt: its arrays make no key, and
        stored voices are many."""
        talker = model.talker
        key = None
        if voice.speaker_embedding is None:
            key = (tuple(self.codec_ids(voice)), voice.instruct_ids)
            kept = self._voice_parts.get(key)
            if kept is not None and kept[0] is talker:
                return kept[1], kept[2]
        device = talker.codec_embedding.device
        ids = lambda xs: ids_on(xs, device)  # noqa: E731
        c = self.config
        codec = talker.codec_hidden(ids(self.codec_ids(voice)))
        before_bos, after_bos = codec[:-1], codec[-1:]
        if voice.speaker_embedding is not None:
            speaker = to_device(voice.speaker_embedding, device).to(codec.dtype)[None]
            before_bos = torch.cat([before_bos[:-1], speaker, before_bos[-1:]])
        if voice.ref_codes is not None:
            reference = frame_embeds(model, to_device(voice.ref_codes, device))
            after_bos = torch.cat([after_bos, reference])
        n = before_bos.shape[0]
        tts_bos, tts_pad = talker.text_hidden(ids([c.tts_bos_token_id, c.tts_pad_token_id]))
        text_side = torch.cat([tts_pad.expand(n - 1, -1), tts_bos[None]], dim=0)
        parts = []
        if voice.instruct_ids:
            parts.append(talker.text_hidden(ids(voice.instruct_ids)))
        parts.append(talker.text_hidden(ids(self.role_ids)))
        parts.append(text_side + before_bos)
        head = torch.cat(parts, dim=0)
        if key is not None:
            if len(self._voice_parts) >= VOICE_PARTS_KEPT:  # instructions make voices unbounded
                self._voice_parts.clear()
            self._voice_parts[key] = (talker, head, after_bos)
        return head, after_bos


def frame_embeds(model: LoadedModel, codes: torch.Tensor) -> torch.Tensor:
    """Frames of codes [T, groups] -> what the talker reads for each [T, hidden]: the
    sum of the frame's code embeddings (group 0 the talker's, 1..15 the predictor's;
    a one-code frame, 25 Hz, is its code's embedding)."""
    first = model.talker.codec_hidden(codes[:, 0])
    if model.predictor is None:
        return first
    return first + model.predictor.embed_sum(codes[:, 1:])
