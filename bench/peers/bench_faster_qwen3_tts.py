"""faster-qwen3-tts on the GPU, beside our engine: the peer numbers of summary.json.

Times faster-qwen3-tts 0.5.4 (CUDA graphs, batch 1) and faster-qwen3-tts-batch 0.2.0 on
randomly initialised Qwen3-TTS-12Hz CustomVoice models built from the config classes of
qwen-tts-hf 0.1.1.post1 (no weights, no hub), at the dimensions our random checkpoints
have (`checkpoint/sizes.py`, `speech_tokenizer/rate12/config.py`: one home for them), with the
text our
benchmark speaks (`benchmark.TEXT`). Length is fixed at --frames by suppressing EOS
(min_new_tokens == max_new_tokens). A fake text processor returns random token ids
(~4 characters a token), which only sets the prefill length.

Writes faster_qwen3_tts.json into --out after every part; a part that fails records its
error and the rest still run. `bench summarise` reads it; bench/peers/README.md says
how to run it (the wheels, the device command).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
import types

import torch

from ttsfleet_runtime.bench.common import TEXT
from ttsfleet_runtime.checkpoint.sizes import model_config
from ttsfleet_runtime.speech_tokenizer.rate12.config import speech_tokenizer_config

T0 = time.time()
RESULTS: dict = {}
OUT = "."


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def dump():
    RESULTS["wall_s"] = round(time.time() - T0, 1)
    with open(os.path.join(OUT, "faster_qwen3_tts.json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def stub_missing():
    """qwen_tts imports librosa/soundfile at module level; neither is used on
    the timed path. Use the real ones if importable, else stub them (after
    transformers, which looks for them by import spec, has been imported)."""
    import transformers  # noqa: F401

    stubs = []
    try:
        import soundfile  # noqa: F401
    except Exception as e:  # pragma: no cover
        m = types.ModuleType("soundfile")
        m.write = m.read = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stub"))
        sys.modules["soundfile"] = m
        stubs.append(f"soundfile ({e!r})")
    try:
        from librosa.filters import mel  # noqa: F401
    except Exception as e:  # pragma: no cover
        lib = types.ModuleType("librosa")
        filt = types.ModuleType("librosa.filters")
        filt.mel = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("stub"))
        lib.filters = filt
        lib.load = lib.resample = filt.mel
        sys.modules["librosa"] = lib
        sys.modules["librosa.filters"] = filt
        stubs.append(f"librosa ({e!r})")
    try:
        import sox  # noqa: F401  (only the 25 Hz tokenizer uses it)
    except Exception as e:
        sys.modules["sox"] = types.ModuleType("sox")
        stubs.append(f"sox ({e!r})")
    return stubs


class FakeProcessor:
    """Stands in for the Qwen2 BPE processor: random ids, ~4 chars/token."""

    def __call__(self, text=None, return_tensors="pt", padding=True, **kw):
        inner = text.replace("<|im_start|>assistant\n", "").replace("<|im_end|>\n", "")
        n = 3 + max(1, math.ceil(len(inner) / 4)) + 5
        g = torch.Generator().manual_seed(len(text))
        return {"input_ids": torch.randint(0, 151000, (1, n), generator=g)}


def _set_attn(cfg, impl="sdpa"):
    for c in [
        cfg,
        getattr(cfg, "talker_config", None),
        getattr(getattr(cfg, "talker_config", None), "code_predictor_config", None),
        getattr(cfg, "speaker_encoder_config", None),
        getattr(cfg, "decoder_config", None),
        getattr(cfg, "encoder_config", None),
    ]:
        if c is None:
            continue
        try:
            c._attn_implementation = impl
        except Exception:
            pass


def _construct(cls, cfg, dtype, device):
    torch.manual_seed(0)
    try:
        with torch.device(device):
            m = cls._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    except Exception as e:
        log("  _from_config failed, direct construction:", repr(e)[:200])
        old = torch.get_default_dtype()
        torch.set_default_dtype(dtype)
        try:
            with torch.device(device):
                m = cls(cfg)
        finally:
            torch.set_default_dtype(old)
    m = m.to(device=device, dtype=dtype).eval()
    bad = 0
    with torch.no_grad():
        for name, p in m.named_parameters():
            if not torch.isfinite(p).all():
                bad += 1
                if p.ndim >= 2:
                    p.normal_(0.0, 0.02)
                elif "norm" in name and name.endswith("weight"):
                    p.fill_(1.0)
                else:
                    p.zero_()
    if bad:
        log(f"  re-initialised {bad} non-finite parameter tensors in {cls.__name__}")
    return m


def build_faster(size, device="cuda", dtype=torch.bfloat16, max_seq_len=2048):
    from faster_qwen3_tts import FasterQwen3TTS
    from faster_qwen3_tts.predictor_graph import PredictorGraph
    from faster_qwen3_tts.talker_graph import TalkerGraph
    from qwen_tts._transformers_compat import restore_rope_buffers
    from qwen_tts.core.models.configuration_qwen3_tts import Qwen3TTSConfig
    from qwen_tts.core.models.modeling_qwen3_tts import Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )
    from qwen_tts.inference.qwen3_tts_model import Qwen3TTSModel
    from qwen_tts.inference.qwen3_tts_tokenizer import Qwen3TTSTokenizer

    t = time.time()
    cfg = Qwen3TTSConfig(**model_config(size, "CustomVoice"))
    _set_attn(cfg)
    model = _construct(Qwen3TTSForConditionalGeneration, cfg, dtype, device)
    restore_rope_buffers(model)
    tcfg = Qwen3TTSTokenizerV2Config(
        decoder_config=speech_tokenizer_config("real").decoder.to_dict()
    )
    _set_attn(tcfg)
    # The Mimi *encoder* (only used for voice-clone reference encoding) cannot be
    # random-initialised under transformers 5.17 (MimiConfig has no rope_theta for
    # qwen_tts's "default" RoPE shim); decode never touches it, so skip building it.
    import qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 as tv2

    enc_cls = tv2.Qwen3TTSTokenizerV2Encoder
    had = "_from_config" in enc_cls.__dict__
    orig = enc_cls.__dict__.get("_from_config")
    enc_cls._from_config = classmethod(lambda cls, c, **k: torch.nn.Identity())
    try:
        codec = _construct(Qwen3TTSTokenizerV2Model, tcfg, dtype, device)
    finally:
        if had:
            enc_cls._from_config = orig
        else:
            del enc_cls._from_config
    restore_rope_buffers(codec)
    st = Qwen3TTSTokenizer()
    st.model, st.config, st.device = codec, codec.config, torch.device(device)
    model.load_speech_tokenizer(st)
    model.load_generate_config({})
    base = Qwen3TTSModel(model=model, processor=FakeProcessor(), generate_defaults={})
    talker = model.talker
    tc = model.config.talker_config
    pg = PredictorGraph(
        talker.code_predictor,
        talker.code_predictor.model.config,
        tc.hidden_size,
        device=device,
        dtype=dtype,
        do_sample=True,
        top_k=50,
        temperature=0.9,
    )
    tg = TalkerGraph(talker.model, tc, device=device, dtype=dtype, max_seq_len=max_seq_len)
    fm = FasterQwen3TTS(
        base_model=base,
        predictor_graph=pg,
        talker_graph=tg,
        device=device,
        dtype=dtype,
        max_seq_len=max_seq_len,
    )
    torch.cuda.synchronize()
    info = {"build_s": round(time.time() - t, 2)}

    def nparams(mod):
        return sum(p.numel() for p in mod.parameters())

    info["params_total_M"] = round(nparams(model) / 1e6, 1)
    info["params_talker_layers_M"] = round(nparams(talker.model.layers) / 1e6, 2)
    info["params_text_embedding_M"] = round(nparams(talker.model.text_embedding) / 1e6, 2)
    info["params_text_projection_M"] = round(nparams(talker.text_projection) / 1e6, 2)
    info["params_codec_head_M"] = round(nparams(talker.codec_head) / 1e6, 2)
    info["params_predictor_layers_M"] = round(nparams(talker.code_predictor.model.layers) / 1e6, 2)
    info["params_predictor_lm_heads_M"] = round(nparams(talker.code_predictor.lm_head) / 1e6, 2)
    info["params_predictor_codec_emb_M"] = round(
        nparams(talker.code_predictor.model.codec_embedding) / 1e6, 2
    )
    info["params_small_to_mtp_M"] = round(
        nparams(talker.code_predictor.small_to_mtp_projection) / 1e6, 2
    )
    info["params_codec_decoder_M"] = round(nparams(codec.decoder) / 1e6, 2)
    info["attn_impl"] = str(talker.model.config._attn_implementation)
    info["gpu_mem_GB_after_build"] = round(torch.cuda.memory_allocated() / 1e9, 2)
    return fm, info


@torch.inference_mode()
def cuda_time(fn, iters=50, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / iters


def generate(fm, frames: int, non_streaming: bool, **options):
    """faster-qwen3-tts's `fast_generate` of TEXT at a fixed length (GPU synchronised)
    -> (model, prompt embeds, trailing text, codes, its timing, seconds)."""
    from faster_qwen3_tts.generate import fast_generate

    m, talker, config, tie, tam, tth, tpe = fm._prepare_generation_custom(
        text=TEXT,
        language="english",
        speaker="ryan",
        instruct=None,
        non_streaming_mode=non_streaming,
    )
    torch.cuda.synchronize()
    t0 = time.time()
    codes, timing = fast_generate(
        talker=talker,
        talker_input_embeds=tie,
        attention_mask=tam,
        trailing_text_hiddens=tth,
        tts_pad_embed=tpe,
        config=config,
        predictor_graph=fm.predictor_graph,
        talker_graph=fm.talker_graph,
        max_new_tokens=frames,
        min_new_tokens=frames,
        **options,
    )
    torch.cuda.synchronize()
    return m, tie, tth, codes, timing, time.time() - t0


@torch.inference_mode()
def bench_single(fm, size, frames, hf_reference):
    r = {}

    t = time.time()
    fm.warmup(prefill_len=70)
    torch.cuda.synchronize()
    r["graph_capture_s"] = round(time.time() - t, 2)
    pg, tg = fm.predictor_graph, fm.talker_graph
    # --- component replay times (GPU only, CUDA events) ---
    # transformers>=5.15 StaticLayer ignores cache_position and advances an internal
    # cumulative_length tensor, so the predictor cache must be reset per replay (as run() does).
    r["predictor_graph_replay_ms"] = round(
        cuda_time(lambda: (pg.static_cache.reset(), pg.graph.replay()), 100), 3
    )
    tg.static_cache.reset()
    r["talker_graph_replay_ms"] = round(cuda_time(lambda: tg.graph.replay(), 100), 3)
    r["talker_max_seq_len"] = tg.max_seq_len
    log(
        f"  {size} replay: predictor {r['predictor_graph_replay_ms']} ms, "
        f"talker {r['talker_graph_replay_ms']} ms"
    )

    # --- end-to-end non-streaming (fast_generate) with fixed length ---
    for mode in (True, False):
        key = "nonstream_text" if mode else "stream_text"
        runs = []
        for _ in range(3):
            m, tie, tth, codes, timing, gen_s = generate(fm, frames, non_streaming=mode)
            t1 = time.time()
            wav, sr = m.speech_tokenizer.decode({"audio_codes": codes.unsqueeze(0)})
            codec_decode_s = time.time() - t1
            audio_s = len(wav[0]) / sr
            runs.append(
                dict(
                    prefill_len=int(tie.shape[1]),
                    trailing_text_len=int(tth.shape[1]),
                    frames=int(codes.shape[0]),
                    prefill_ms=round(timing["prefill_ms"], 2),
                    ms_per_frame=round(timing["ms_per_step"], 3),
                    gen_s=round(gen_s, 4),
                    codec_decode_s=round(codec_decode_s, 4),
                    audio_s=round(audio_s, 3),
                    rtf=round((gen_s + codec_decode_s) / audio_s, 4),
                )
            )
        r[key] = runs
        log(f"  {size} {key}: {runs[-1]}")

    # --- reference (no CUDA graph) HF generate path, for comparison ---
    if hf_reference:
        try:
            *_, codes, _, el = generate(fm, 48, non_streaming=False, parity_mode=True)
            r["hf_reference_generate"] = dict(
                frames=int(codes.shape[0]),
                total_s=round(el, 3),
                ms_per_frame=round(el / codes.shape[0] * 1000, 2),
                rtf_no_codec=round(el / (codes.shape[0] / 12.5), 4),
            )
            log(f"  {size} HF reference generate: {r['hf_reference_generate']}")
        except Exception as e:
            r["hf_reference_generate"] = {"error": repr(e), "tb": traceback.format_exc()[-2000:]}
            log("  HF reference failed", repr(e))

    # --- streaming TTFA via the public streaming API ---
    for cs in (1, 4, 12):
        runs = []
        nf = frames if cs != 1 else 24
        for _ in range(3):
            t0 = time.time()
            chunk_t = []
            for audio, _sr, _timing in fm.generate_custom_voice_streaming(
                text=TEXT,
                speaker="ryan",
                language="english",
                non_streaming_mode=False,
                max_new_tokens=nf,
                min_new_tokens=nf,
                chunk_size=cs,
            ):
                chunk_t.append((time.time() - t0, len(audio)))
            tot = chunk_t[-1][0]
            samples = sum(c[1] for c in chunk_t)
            gaps = [chunk_t[i][0] - chunk_t[i - 1][0] for i in range(1, len(chunk_t))]
            runs.append(
                dict(
                    ttfa_ms=round(chunk_t[0][0] * 1000, 1),
                    first_chunk_samples=chunk_t[0][1],
                    n_chunks=len(chunk_t),
                    total_s=round(tot, 3),
                    audio_s=round(samples / 24000, 3),
                    rtf=round(tot / (samples / 24000), 4),
                    max_gap_ms=round(max(gaps) * 1000, 1) if gaps else None,
                    mean_gap_ms=round(sum(gaps) / len(gaps) * 1000, 1) if gaps else None,
                )
            )
        r[f"streaming_chunk{cs}"] = runs
        log(f"  {size} streaming chunk={cs}: {runs[-1]}")

    # --- codec decoder alone ---
    codec = fm.model.model.speech_tokenizer.model
    dec = {}
    for T in (1 + 25, 4 + 25, 12 + 25, 4, 12, 120, 250):
        codes = torch.randint(0, 2048, (1, T, 16), device="cuda")
        with torch.inference_mode():
            dec[f"T{T}_ms"] = round(cuda_time(lambda codes=codes: codec.decode(codes), 10, 2), 2)
    for B in (8, 32):
        codes = torch.randint(0, 2048, (B, 12 + 25, 16), device="cuda")
        with torch.inference_mode():
            dec[f"B{B}_T37_ms"] = round(cuda_time(lambda codes=codes: codec.decode(codes), 5, 2), 2)
    r["codec_decode"] = dec
    log(f"  {size} codec decode: {dec}")
    return r


# ---------------------------------------------------------------- batch package compat
def patch_batch_pkg():
    """faster-qwen3-tts-batch 0.2.0 targets transformers 4.57; patch the three
    API differences with transformers 5.x (StaticLayer.lazy_initialization
    arity, create_causal_mask kwargs, DynamicCache indexing)."""
    import faster_qwen3_tts_batch.batched_predictor_graph as bpg
    import faster_qwen3_tts_batch.batched_talker_graph as btg

    def lazy(layer, k):
        try:
            layer.lazy_initialization(k, k)
        except TypeError:
            layer.lazy_initialization(k)

    def t_init(self):
        k = torch.zeros(
            self.max_batch_size,
            self._num_kv_heads,
            1,
            self._head_dim,
            dtype=self.dtype,
            device=self.device,
        )
        for layer in self.static_cache.layers:
            if not layer.is_initialized:
                lazy(layer, k)

    def p_init(self):
        c = self.pred_model.config
        k = torch.zeros(
            self.max_batch_size,
            c.num_key_value_heads,
            1,
            c.head_dim,
            dtype=self.dtype,
            device=self.device,
        )
        for layer in self.static_cache.layers:
            if not layer.is_initialized:
                lazy(layer, k)

    def p_mask(self, input_embeds, cache_position):
        L = self.max_seq
        kp = torch.arange(L, device=self.device)
        allowed = kp.unsqueeze(0) <= cache_position.unsqueeze(1)
        mn = torch.finfo(input_embeds.dtype).min
        m = torch.where(
            allowed,
            torch.zeros((), dtype=input_embeds.dtype, device=self.device),
            torch.full((), mn, dtype=input_embeds.dtype, device=self.device),
        )[None, None]
        return {"full_attention": m}

    def t_maskfn(
        config=None,
        input_embeds=None,
        attention_mask=None,
        cache_position=None,
        past_key_values=None,
    ):
        L = attention_mask.shape[1]
        kp = torch.arange(L, device=attention_mask.device)
        allowed = (kp.unsqueeze(0) <= cache_position.view(-1, 1)) & attention_mask.bool()
        mn = torch.finfo(input_embeds.dtype).min
        m = torch.where(
            allowed,
            torch.zeros((), dtype=input_embeds.dtype, device=allowed.device),
            torch.full((), mn, dtype=input_embeds.dtype, device=allowed.device),
        )
        return m[:, None, None, :]

    orig_tinit = btg.BatchedTalkerGraph.__init__

    def t_ctor(self, *a, **k):
        orig_tinit(self, *a, **k)
        self._mask_fn = t_maskfn

    def prefill_kv_batched(self, past_key_values, max_prefill_len, B_actual):
        self.static_cache.reset()
        cache_pos = torch.arange(max_prefill_len, device=self.device)
        for li in range(self.num_layers):
            lay = past_key_values.layers[li]
            k, v = lay.keys, lay.values
            if B_actual < self.max_batch_size:
                pad = self.max_batch_size - B_actual
                k = torch.cat([k, k.new_zeros(pad, *k.shape[1:])], 0)
                v = torch.cat([v, v.new_zeros(pad, *v.shape[1:])], 0)
            self.static_cache.update(k, v, li, {"cache_position": cache_pos})
        return max_prefill_len

    btg.BatchedTalkerGraph._init_cache_layers = t_init
    btg.BatchedTalkerGraph.__init__ = t_ctor
    btg.BatchedTalkerGraph.prefill_kv_batched = prefill_kv_batched
    bpg.BatchedPredictorGraph._init_cache_layers = p_init
    bpg.BatchedPredictorGraph._make_attn_mask = p_mask


@torch.inference_mode()
def bench_batch(fm, size, frames, batches, budget_s):
    from faster_qwen3_tts_batch import BatchedFasterQwen3TTS
    from faster_qwen3_tts_batch.batched_generate import batched_fast_generate

    out = {}
    for B in batches:
        if time.time() - T0 > budget_s:
            out[f"B{B}"] = {"skipped": "time budget"}
            continue
        r = {}
        try:
            texts = [TEXT[: 80 + (i * 37) % 140] for i in range(B)]  # varied prefill lengths
            inputs = [
                fm._prepare_generation_custom(
                    text=tx,
                    language="english",
                    speaker="ryan",
                    instruct=None,
                    non_streaming_mode=False,
                )
                for tx in texts
            ]
            m, talker, config = inputs[0][0], inputs[0][1], inputs[0][2]
            bm = BatchedFasterQwen3TTS(fm, max_batch_size=B, max_seq_len=512)
            t = time.time()
            bm.batched_predictor_graph.capture(num_warmup=2)
            bm.batched_talker_graph.capture(
                prefill_len=max(i[3].shape[1] for i in inputs), num_warmup=2
            )
            bm._warmed_up = True
            torch.cuda.synchronize()
            r["capture_s"] = round(time.time() - t, 2)
            bp, bt = bm.batched_predictor_graph, bm.batched_talker_graph
            r["predictor_graph_replay_ms"] = round(
                cuda_time(lambda bp=bp: (bp.static_cache.reset(), bp.graph.replay()), 30), 3
            )
            bt.static_cache.reset()
            r["talker_graph_replay_ms"] = round(cuda_time(lambda bt=bt: bt.graph.replay(), 30), 3)
            runs = []
            for _ in range(2):
                talker.rope_deltas = None
                torch.cuda.synchronize()
                t0 = time.time()
                res = batched_fast_generate(
                    talker=talker,
                    talker_input_embeds_list=[i[3] for i in inputs],
                    attention_mask_list=[i[4] for i in inputs],
                    trailing_text_hiddens_list=[i[5] for i in inputs],
                    tts_pad_embed=inputs[0][6],
                    config=config,
                    predictor_graph=bp,
                    talker_graph=bt,
                    max_new_tokens=frames,
                    min_new_tokens=frames,
                )
                torch.cuda.synchronize()
                t1 = time.time()
                nfr = [int(c.shape[0]) for c, _ in res if c is not None]
                codes = torch.stack([c for c, _ in res], 0)  # [B, T, 16]
                with torch.inference_mode():
                    m.speech_tokenizer.model.decode(codes)
                torch.cuda.synchronize()
                t2 = time.time()
                audio_s = sum(nfr) / 12.5
                runs.append(
                    dict(
                        frames_per_req=nfr[0],
                        min_frames=min(nfr),
                        prefill_ms=round(res[0][1]["prefill_ms"] * B, 1),
                        gen_s=round(t1 - t0, 3),
                        ms_per_step=round((t1 - t0) / frames * 1000, 2),
                        codec_decode_batch_s=round(t2 - t1, 3),
                        audio_s_per_s_gen=round(audio_s / (t1 - t0), 2),
                        audio_s_per_s_incl_decode=round(audio_s / (t2 - t0), 2),
                        per_stream_rtf=round((t1 - t0) / (nfr[0] / 12.5), 4),
                    )
                )
            r["runs"] = runs
            log(
                f"  {size} batch B={B}: replay pred {r['predictor_graph_replay_ms']} "
                f"talker {r['talker_graph_replay_ms']} | {runs[-1]}"
            )
            bm = bp = bt = None  # noqa: F841
        except Exception as e:
            r["error"] = repr(e)
            r["traceback"] = traceback.format_exc()[-3000:]
            log(f"  batch B={B} FAILED: {e!r}")
        out[f"B{B}"] = r
        torch.cuda.empty_cache()
        RESULTS.setdefault(size, {})["batch"] = out
        dump()
    return out


def environment() -> dict:
    from importlib import metadata

    env = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        python=sys.version.split()[0],
        date=time.strftime("%Y-%m-%d", time.gmtime()),
        command=" ".join(sys.argv),
    )
    for package in ("transformers", "faster-qwen3-tts", "faster-qwen3-tts-batch", "qwen-tts-hf"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            env[package] = None
    return env


def main(argv: list[str] | None = None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".", help="folder for faster_qwen3_tts.json")
    ap.add_argument("--sizes", default="1.7B,0.6B")
    ap.add_argument("--frames", type=int, default=120, help="frames per request (EOS suppressed)")
    ap.add_argument("--batches", default="1,8,32", help="batch sizes (faster-qwen3-tts-batch)")
    ap.add_argument("--budget-s", type=float, default=400, help="start no new part after this")
    ap.add_argument(
        "--hf-reference", action="store_true", help="also time HF generate (no graphs; slow)"
    )
    a = ap.parse_args(argv)
    OUT = a.out
    os.makedirs(OUT, exist_ok=True)
    RESULTS["config"] = {k: v for k, v in vars(a).items() if k != "out"}
    RESULTS["env"] = environment()
    log("env", RESULTS["env"])
    dump()
    try:
        if not torch.cuda.is_available():
            raise RuntimeError("faster-qwen3-tts needs a CUDA GPU")
        RESULTS["stubs"] = stub_missing()
        import qwen_tts  # noqa: F401  (applies the RoPE registry patch)

        patch_batch_pkg()
    except Exception as e:
        RESULTS["error"] = repr(e)
        RESULTS["traceback"] = traceback.format_exc()[-3000:]
        log("cannot run the peer:", repr(e))
        dump()
        return 1
    for size in a.sizes.split(","):
        if time.time() - T0 > a.budget_s:
            log(f"skip {size}: time budget")
            RESULTS[size] = {"skipped": "time budget"}
            continue
        RESULTS[size] = {}
        fm = None
        try:
            fm, info = build_faster(size)
            RESULTS[size]["build"] = info
            log(size, "build", info)
            dump()
            RESULTS[size]["single"] = bench_single(fm, size, a.frames, a.hf_reference)
            dump()
            batches = [int(x) for x in a.batches.split(",") if x]
            bench_batch(fm, size, a.frames, batches, a.budget_s)
        except Exception as e:
            RESULTS[size]["error"] = repr(e)
            RESULTS[size]["traceback"] = traceback.format_exc()[-4000:]
            log(f"{size} FAILED", traceback.format_exc())
        dump()
        fm = None
        torch.cuda.empty_cache()
    dump()
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
