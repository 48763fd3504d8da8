"""fp8 weights against bf16 on the same checkpoint: how far the fp8 model drifts, what
it saves, how fast it steps.

Per checkpoint, both models loaded side by side (`--weights bf16` and `fp8` as a server
loads them, model/fp8.py), then:

- teacher-forced logits divergence: one pass of each model over the bf16 model's own
  codes (a sampled run of `--frames` frames), so an early error never compounds: per
  step the KL(bf16 || fp8) of the talker's first-codebook distribution (control ids the
  engine never samples left out) and of each of the code predictor's 15 codebooks, and
  whether their top-1 codes agree. The predictor reads each model's own talker state;
- code agreement over free runs: `--seeds` streams of `--frames` frames (EOS
  suppressed), each model sampling with the same seeds (the API's default sampling)
  and greedily: the frame of the first difference in each stream (None: none);
- waveform SNR after the codec (float32, the same for both): fp8 audio against bf16
  audio of the same seed (and, to read it against, bf16 against bf16 of the next seed:
  two draws of one model), and of the teacher-forced top-1 codes (one-step errors only);
- speed: a decode step (talker + 15 predictor passes + sampling) at each `--batches`,
  as the server runs it (CUDA graph replays timed with CUDA events; eager on the CPU):
  at batch 1 that is ms per frame;
- weight bytes (LoadedModel.weight_bytes).

Random weights are not trained weights: their logits are flatter, so top-1 agreement
and first divergence here say little about a trained checkpoint. Measure one with
`--model /path/to/checkpoint --sizes <label>` (docs/benchmarks.md, "fp8 weights").

Writes OUT/fp8_drift.json (summary, machine, versions) after each size and
OUT/fp8_drift_samples.json.gz (every per-step value, every timing).

On the GPU machine, from the repository root (~6 minutes for both sizes):
    PYTHONPATH=runtime python3 bench/fp8_drift.py --out $OUT --sizes 1.7B,0.6B
On the CPU (tiny model, the fp8 product in torch, as the tests run it):
    PYTHONPATH=runtime python3 bench/fp8_drift.py --device cpu --sizes tiny \
        --model CKPT --frames 8 --seeds 2 --batches 1,2 --out /tmp/d
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import gzip
import json
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import torch

from ttsfleet_runtime.bench.common import TEXT, Budget, machine_facts, ready_checkpoint
from ttsfleet_runtime.bench.fp8_pair import (
    WAYS,
    Side,
    load_side,
    prepare_device,
    slot_params,
    step_ms,
)

REPO = Path(__file__).resolve().parents[1]


@dataclasses.dataclass
class Utterance:
    embeds: torch.Tensor  # the talker's prefill input [P, hidden]
    text: list[int]  # the text ids fed one a frame after the prompt


def utterance(model, ckpt: str) -> Utterance:
    from ttsfleet_runtime.model.prompt import PromptBuilder
    from ttsfleet_runtime.model.text_tokenizer import TextTokenizer

    builder = PromptBuilder(model.config, TextTokenizer.from_checkpoint(ckpt))
    voice = builder.speakers[0] if builder.speakers else None
    prompt = builder.voice(voice, None, "english", None)
    stream = builder.text_stream(prompt, builder.text_ids(TEXT), closed=True)
    lead = prompt.prompt_text_ids
    return Utterance(builder.prefill_embeds(model, prompt, stream[:lead]), stream[lead:])


# ---------------------------------------------------------------- free runs
@torch.inference_mode()
def free_run(side: Side, utt: Utterance, seeds: list[int], frames: int, greedy: bool):
    """Streams of `frames` frames, one a seed, stepped together as the engine steps
    them. -> codes [streams, frames, groups] (host)."""
    from ttsfleet_runtime.engine.kv_blocks import blocks_for
    from ttsfleet_runtime.engine.prefill_rows import Prompt

    runner, n = side.runner, len(seeds)
    per_row = blocks_for(runner.max_len, runner.cache.block_size)
    for slot in range(n):
        runner.set_blocks(slot, list(range(1 + slot * per_row, 1 + (slot + 1) * per_row)))
    from ttsfleet_runtime.engine.model_runner import PREFILL_PROMPTS

    for first in range(0, n, PREFILL_PROMPTS):
        runner.prefill(
            [
                Prompt(slot, utt.embeds, slot_params(seeds[slot], frames, greedy))
                for slot in range(first, min(n, first + PREFILL_PROMPTS))
            ]
        )
    runner.set_texts([(slot, utt.text, 0) for slot in range(n)])
    position = utt.embeds.shape[0]
    out = []
    for _ in range(frames):
        codes, _ = runner.decode(n, [True] * n, position + 1)
        out.append(codes)
        position += 1
    runner.release(*range(n))
    return torch.stack(out, dim=1)


def first_difference(a: torch.Tensor, b: torch.Tensor) -> int | None:
    """The first frame where codes [frames, groups] (or [frames]) differ; None: none."""
    differs = (a != b).reshape(a.shape[0], -1).any(dim=1).nonzero()
    return int(differs[0]) if differs.numel() else None


# ---------------------------------------------------------------- teacher forcing
@torch.inference_mode()
def teacher_forced_logits(side: Side, utt: Utterance, codes: torch.Tensor) -> dict:
    """Both heads' logits on the bf16 run's codes [frames, groups], in one pass each:
    the talker over the prompt and every frame's input (as `ModelRunner.step` builds
    it), the predictor over every frame's 16 positions. -> float32 talker [frames,
    vocab] and predictor [frames, 15, vocab] logits."""
    model = side.model
    talker, predictor, cfg = model.talker, model.predictor, model.config.talker
    device = utt.embeds.device
    codes = codes.to(device)
    frames = codes.shape[0]
    pad = model.config.tts_pad_token_id
    text = torch.tensor(
        [utt.text[t] if t < len(utt.text) else pad for t in range(frames - 1)],
        dtype=torch.int64,
        device=device,
    )
    inputs = (
        talker.codec_hidden(codes[:-1, 0])
        + predictor.embed_sum(codes[:-1, 1:])
        + talker.text_hidden(text)
    )
    x = torch.cat([utt.embeds, inputs])[None]
    T, prompt = x.shape[1], utt.embeds.shape[0]
    cache = torch.zeros(
        cfg.num_hidden_layers,
        1,
        cfg.num_key_value_heads,
        T,
        cfg.head_dim,
        dtype=x.dtype,
        device=device,
    )
    hidden = talker.prefill(x, cache, cache.clone())[0, prompt - 1 :]  # [frames, hidden]
    talker_logits = talker.logits(hidden).float()
    # The predictor: [talker state, code 0, codes 1..14] -> codebooks 1..15 at positions 1..15.
    p_cfg = cfg.code_predictor
    steps = [predictor.project(hidden), predictor.project(talker.codec_hidden(codes[:, 0]))]
    steps += [predictor.embed_projected(g, codes[:, g]) for g in range(1, cfg.num_code_groups - 1)]
    px = torch.stack(steps, dim=1)
    p_cache = torch.zeros(
        p_cfg.num_hidden_layers,
        frames,
        p_cfg.num_key_value_heads,
        px.shape[1],
        p_cfg.head_dim,
        dtype=px.dtype,
        device=device,
    )
    out = predictor.prefill(px, p_cache, p_cache.clone())
    predictor_logits = torch.stack(
        [predictor.logits(g, out[:, g]).float() for g in range(1, cfg.num_code_groups)], dim=1
    )
    return dict(talker=talker_logits, predictor=predictor_logits)


def divergence(reference: torch.Tensor, other: torch.Tensor) -> tuple[list, list]:
    """Per row: KL(softmax(reference) || softmax(other)) in nats, and top-1 agreement."""
    log_p = torch.log_softmax(reference, dim=-1)
    log_q = torch.log_softmax(other, dim=-1)
    kl = (log_p.exp() * (log_p - log_q)).sum(dim=-1)
    agree = reference.argmax(dim=-1) == other.argmax(dim=-1)
    return kl.cpu().tolist(), agree.cpu().tolist()


def spread(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    return dict(
        mean=statistics.fmean(ordered),
        p50=ordered[len(ordered) // 2],
        p95=ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
        max=ordered[-1],
    )


# ---------------------------------------------------------------- audio
def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float:
    """10 log10(|reference|^2 / |other - reference|^2) over the samples."""
    noise = (other.double() - reference.double()).pow(2).sum().item()
    signal = reference.double().pow(2).sum().item()
    if noise == 0:
        return math.inf
    return 10 * math.log10(max(signal, 1e-30) / noise)


# ---------------------------------------------------------------- one checkpoint
def measure(size: str, args, summary: dict, raw: dict) -> None:
    from ttsfleet_runtime.speech_tokenizer.rate12.decoder import load_speech_tokenizer

    log = args.budget.log
    ckpt = ready_checkpoint(size, args)
    sides = {}
    for weights in WAYS:
        sides[weights] = load_side(ckpt, weights, args)
        log(f"{size}: {weights} loaded")
    r = summary["sizes"][size] = dict(checkpoint=ckpt)
    samples = raw["sizes"][size] = {}
    r["weight_bytes"] = {w: side.model.weight_bytes() for w, side in sides.items()}
    utt = {w: utterance(side.model, ckpt) for w, side in sides.items()}
    seeds = list(range(args.seeds))

    # Free runs, sampled and greedy; the sampled bf16 codes are the teacher's.
    runs = {}
    for mode in ("sampled", "greedy"):
        for w, side in sides.items():
            t = time.monotonic()
            runs[mode, w] = free_run(side, utt[w], seeds, args.frames, greedy=mode == "greedy")
            log(f"{size}: {mode} free run, {w}: {args.seeds} x {args.frames} frames", end_s(t))
    r["free_run"] = {}
    for mode in ("sampled", "greedy"):
        first = [
            first_difference(runs[mode, "bf16"][i], runs[mode, "fp8"][i]) for i in range(len(seeds))
        ]
        same = (runs[mode, "bf16"] == runs[mode, "fp8"]).float()
        first0 = [
            first_difference(runs[mode, "bf16"][i, :, 0], runs[mode, "fp8"][i, :, 0])
            for i in range(len(seeds))
        ]
        r["free_run"][mode] = dict(
            streams=len(seeds),
            frames=args.frames,
            first_difference_frames=first,
            first_difference_frames_group0=first0,
            streams_without_difference=sum(f is None for f in first),
            first_difference_median=median_or_none([f for f in first if f is not None]),
            codes_equal_share=round(same.mean().item(), 4),
            codes_equal_share_group0=round(same[..., 0].mean().item(), 4),
        )
    samples["free_run_codes"] = {f"{m}/{w}": c.tolist() for (m, w), c in runs.items()}
    log(f"{size}: free runs", r["free_run"])

    # Teacher forcing on the bf16 model's sampled streams, one pass a stream and way.
    logits = {
        w: {
            head: torch.cat(parts)
            for head, parts in zip(
                ("talker", "predictor"),
                zip(
                    *(
                        teacher_forced_logits(side, utt[w], teacher).values()
                        for teacher in runs["sampled", "bf16"]
                    ),
                    strict=True,
                ),
                strict=True,
            )
        }
        for w, side in sides.items()
    }
    cfg = sides["bf16"].model.config
    allowed = list(range(cfg.codebook_size)) + [cfg.talker.codec_eos_token_id]
    kl0, top0 = divergence(
        logits["bf16"]["talker"][:, allowed], logits["fp8"]["talker"][:, allowed]
    )
    groups = logits["bf16"]["predictor"].shape[1]
    kl_groups, top_groups = zip(
        *(
            divergence(logits["bf16"]["predictor"][:, g], logits["fp8"]["predictor"][:, g])
            for g in range(groups)
        ),
        strict=True,
    )
    every_kl = [k for group in kl_groups for k in group]
    every_top = [a for group in top_groups for a in group]
    r["teacher_forced"] = dict(
        streams=len(seeds),
        frames=len(kl0),
        talker_kl_nats=spread(kl0),
        talker_top1_agreement=round(sum(top0) / len(top0), 4),
        predictor_kl_nats=spread(every_kl),
        predictor_top1_agreement=round(sum(every_top) / len(every_top), 4),
        predictor_top1_agreement_by_group=[round(sum(a) / len(a), 4) for a in top_groups],
    )
    samples["teacher_forced"] = dict(
        talker_kl=kl0,
        talker_top1=top0,
        predictor_kl_by_group=list(kl_groups),
        predictor_top1_by_group=list(top_groups),
    )
    log(f"{size}: teacher forced", r["teacher_forced"])

    # Audio through the codec (float32, on the device): the same decoder for both ways.
    codec = load_speech_tokenizer(Path(ckpt) / "speech_tokenizer", args.device, torch.float32)
    device = args.device

    def audio(codes: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return codec.decode(codes.to(device)).cpu()

    sampled = {w: audio(runs["sampled", w]) for w in WAYS}
    greedy = {w: audio(runs["greedy", w]) for w in WAYS}
    # Each way's top-1 codes under teacher forcing, the first stream's frames.
    frames, ids = args.frames, torch.tensor(allowed)
    top1 = {
        w: torch.cat(
            [
                ids[logits[w]["talker"][:frames, allowed].argmax(-1).cpu()][:, None],
                logits[w]["predictor"][:frames].argmax(-1).cpu(),
            ],
            dim=1,
        )
        for w in WAYS
    }
    tf_audio = {w: audio(top1[w][None]) for w in WAYS}
    per_seed = [snr_db(sampled["bf16"][i], sampled["fp8"][i]) for i in seeds]
    per_seed_greedy = [snr_db(greedy["bf16"][i], greedy["fp8"][i]) for i in seeds]
    two_draws = [snr_db(sampled["bf16"][i], sampled["bf16"][i + 1]) for i in seeds[:-1]]
    r["waveform_snr_db"] = dict(
        sampled_fp8_vs_bf16_median=median_or_none(per_seed),
        greedy_fp8_vs_bf16_median=median_or_none(per_seed_greedy),
        bf16_two_seeds_median=median_or_none(two_draws),
        teacher_forced_top1_fp8_vs_bf16=snr_db(tf_audio["bf16"][0], tf_audio["fp8"][0]),
        teacher_forced_top1_codes_equal_share=round(
            (top1["bf16"] == top1["fp8"]).float().mean().item(), 4
        ),
    )
    samples["waveform_snr_db"] = dict(
        sampled=per_seed, greedy=per_seed_greedy, bf16_two_seeds=two_draws
    )
    log(f"{size}: waveform SNR", r["waveform_snr_db"])

    # Speed last: it leaves the runners' state made up.
    r["step_ms"] = {}
    samples["step_ms"] = {}
    for B in args.batch_sizes:
        for w, side in sides.items():
            t = step_ms(side, B, args)
            r["step_ms"][f"{w}_B{t['batch']}"] = round(t["ms"], 4)
            samples["step_ms"][f"{w}_B{t['batch']}"] = t["samples_ms"]
            r["step_how"] = t["how"]
    log(f"{size}: step ms ({r['step_how']})", r["step_ms"])
    r["ms_per_frame_b1"] = {w: r["step_ms"].get(f"{w}_B1") for w in WAYS}


def end_s(t: float) -> str:
    return f"({time.monotonic() - t:.1f} s)"


def median_or_none(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None]
    return statistics.median(finite) if finite else None


# ---------------------------------------------------------------- driver
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for fp8_drift.json and the samples")
    ap.add_argument("--sizes", default="1.7B,0.6B", help="random checkpoints: 1.7B, 0.6B, tiny")
    ap.add_argument("--model", default=None, help="this checkpoint instead (one --sizes label)")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--frames", type=int, default=250, help="frames a free run (12.5 a second)")
    ap.add_argument("--seeds", type=int, default=8, help="free-run streams, one seed each")
    ap.add_argument("--batches", default="1,128", help="decode batch sizes timed")
    ap.add_argument("--kv-len", type=int, default=256, help="occupied KV positions when timed")
    ap.add_argument("--replays", type=int, default=200, help="timed graph replays")
    ap.add_argument("--budget-s", type=float, default=330, help="skip sizes after this")
    args = ap.parse_args(argv)
    args.budget = Budget(args.budget_s)
    args.dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    args.batch_sizes = [int(b) for b in args.batches.split(",") if b]
    args.max_len = max(512, args.frames + 192)  # the prompt and a free run's frames
    prepare_device(args.device, ap.error)
    if args.seeds < 2:
        ap.error("--seeds must be at least 2 (the two-draw SNR baseline)")
    os.makedirs(args.out, exist_ok=True)
    config = {k: v for k, v in vars(args).items() if k not in ("out", "budget")}
    summary: dict = dict(env=machine_facts(args.device, REPO), config=config, sizes={})
    raw: dict = dict(config=config, sizes={})

    def dump() -> None:
        summary["wall_s"] = round(args.budget.elapsed_s(), 1)
        Path(args.out, "fp8_drift.json").write_text(json.dumps(summary, indent=1, default=str))
        with gzip.open(Path(args.out, "fp8_drift_samples.json.gz"), "wt") as f:
            json.dump(raw, f, default=str)

    dump()
    for size in args.sizes.split(","):
        if args.budget.left_s() < 0:
            summary["sizes"][size] = dict(skipped="time budget")
            continue
        try:
            measure(size, args, summary, raw)
        except Exception as e:
            summary["sizes"].setdefault(size, {})["error"] = repr(e)
            summary["sizes"][size]["traceback"] = traceback.format_exc()[-3000:]
            args.budget.log(f"{size}: FAILED", traceback.format_exc())
        dump()
        gc.collect()
        if args.device == "cuda":
            torch.cuda.empty_cache()
    args.budget.log(f"wrote {args.out}/fp8_drift.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
