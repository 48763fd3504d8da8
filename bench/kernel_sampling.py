#!/usr/bin/env python3
"""GPU check and timing: the sort-free sampling kernel vs engine.sampling.

(1) Correctness on the GPU, exact ids: the kernel against eager
`engine.sampling.sample` (the sort) on random logits, bf16 and fp32, every
(temperature, top_k, top_p) of the test grid in one batch, V 2048 (predictor)
and 3072 (talker, with `first_code_logits`' processors); the kernel's Gumbel
noise against `gumbel_noise`, bit for bit; the kernel replayed in a CUDA graph
on fresh logits.
(2) Timing: one decode step's worth of calls (16) captured in a CUDA graph,
replays timed with CUDA events, median microseconds per call, for B in
{1, 8, 32, 128, 256} x V in {2048, 3072} x two parameter sets (the model's
defaults top_k 50 / top_p 1.0, and top_p 0.8 which runs the top-p search):
today's eager and torch.compile'd (as engine/fusion.py) sampling vs the kernel
at num_warps 2/4/8/16 (the default first). Each variant's ids are checked
against the eager reference before it is timed.

Usage: PYTHONPATH=runtime python3 bench/kernel_sampling.py --out DIR
       (--smoke: tiny shapes, runs on the CPU under TRITON_INTERPRET=1, no timing)
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import traceback

import torch
import triton

from ttsfleet_runtime.benchmark import timed
from ttsfleet_runtime.engine import sampling as ref
from ttsfleet_runtime.kernels import sampling as kern

CALLS_PER_GRAPH = 16  # a decode step samples 16 times
TEMPERATURES = (0.0, 0.7, 1.0, 1.3)
TOP_KS = (0, 1, 5, 50, "V", "V+7")
TOP_PS = (0.1, 0.5, 0.9, 1.0)
PARAM_SETS = {"k50_p1.0": (0.9, 50, 1.0), "k50_p0.8": (0.9, 50, 0.8)}


def grid_params(B: int, V: int, device, gen):
    """B rows cycling through the full product of the test grid; fresh seeds."""
    combos = list(itertools.product(TEMPERATURES, TOP_KS, TOP_PS))
    rows = [combos[i % len(combos)] for i in range(B)]
    k_of = {"V": V, "V+7": V + 7}
    return (
        torch.tensor([r[0] for r in rows], dtype=torch.float32, device=device),
        torch.tensor([k_of.get(r[1], r[1]) for r in rows], dtype=torch.int64, device=device),
        torch.tensor([r[2] for r in rows], dtype=torch.float32, device=device),
        torch.randint(-(2**62), 2**62, (B,), generator=gen).to(device),
        torch.randint(0, 2**40, (B,), generator=gen).to(device),
    )


def uniform_params(B: int, setting: tuple, device, gen):
    t, k, p = setting
    return (
        torch.full((B,), t, dtype=torch.float32, device=device),
        torch.full((B,), k, dtype=torch.int64, device=device),
        torch.full((B,), p, dtype=torch.float32, device=device),
        torch.randint(0, 2**40, (B,), generator=gen).to(device),
        torch.randint(0, 2**40, (B,), generator=gen).to(device),
    )


def processors(B: int, V: int, device, gen):
    """first_code_logits' inputs, as the talker has them (EOS at V - 2)."""
    seen = (torch.rand(B, V, generator=gen) < 0.05).to(device)
    penalty = (1.0 + 0.5 * torch.rand(B, generator=gen)).to(device)
    suppressed = torch.zeros(V, dtype=torch.bool, device=device)
    suppressed[V - 1024 :] = True
    suppressed[V - 2] = False
    eos_only = torch.zeros(V, dtype=torch.bool, device=device)
    eos_only[V - 2] = True
    too_early = (torch.rand(B, generator=gen) < 0.5).to(device)
    return dict(
        seen=seen, penalty=penalty, suppressed=suppressed, eos_only=eos_only, too_early=too_early
    )


def reference(sample_fn, logits_fn, logits, params, procs):
    """Today's path: first_code_logits (when the talker) then sample."""
    if procs:
        logits = logits_fn(logits, *procs.values())
    return sample_fn(logits, *params)


def mismatches(got: torch.Tensor, want: torch.Tensor) -> int:
    return int((got != want).sum())


def check_correctness(device, smoke: bool, gen) -> dict:
    out = {}
    B = 16 if smoke else 2048
    for V, dtype in itertools.product(
        (64,) if smoke else (2048, 3072), (torch.bfloat16, torch.float32)
    ):
        for with_procs in (False, True):
            name = f"ids_V{V}_{str(dtype).split('.')[-1]}{'_processors' if with_procs else ''}"
            try:
                logits = (torch.randn(B, V, generator=gen) * 3.0).to(dtype).to(device)
                params = grid_params(B, V, device, gen)
                procs = processors(B, V, device, gen) if with_procs else {}
                want = reference(ref.sample, ref.first_code_logits, logits, params, procs)
                got = kern.sample(logits, *params, **procs)
                out[name] = {"rows": B, "mismatches": mismatches(got, want)}
            except Exception:
                out[name] = {"error": traceback.format_exc()}
    try:
        n = 64 if smoke else 1024
        seed = torch.randint(-(2**62), 2**62, (n,), generator=gen).to(device)
        counter = torch.randint(0, 2**40, (n,), generator=gen).to(device)
        for V in (64,) if smoke else (2048, 3072):
            a, b = kern.gumbel_noise(seed, counter, V), ref.gumbel_noise(seed, counter, V)
            out[f"noise_V{V}"] = {
                "values": a.numel(),
                "unequal_bits": int((a.view(torch.int32) != b.view(torch.int32)).sum()),
                "max_abs_diff": float((a - b).abs().max()),
            }
    except Exception:
        out["noise"] = {"error": traceback.format_exc()}
    if device.type == "cuda":
        try:  # captured once, replayed on new logits copied into the static input
            V, Bg = 2048, 64
            static = torch.randn(Bg, V, device=device).to(torch.bfloat16)
            params = grid_params(Bg, V, device, gen)
            graph, outs = capture(lambda: kern.sample(static, *params), calls=1)
            bad = 0
            for _ in range(5):
                static.copy_(torch.randn(Bg, V, generator=gen).to(torch.bfloat16))
                params[4].copy_(torch.randint(0, 2**40, (Bg,), generator=gen))
                graph.replay()
                bad += mismatches(outs[0], ref.sample(static, *params))
            out["graph_replay_new_inputs"] = {"replays": 5, "rows": Bg, "mismatches": bad}
        except Exception:
            out["graph_replay_new_inputs"] = {"error": traceback.format_exc()}
    return out


def capture(fn, calls: int):
    """Warm up on a side stream, then capture `calls` calls in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [fn() for _ in range(calls)]
    graph.replay()
    torch.cuda.synchronize()
    return graph, outs


def time_replays(graph, reps: int) -> list[float]:
    """Microseconds per sampling call, one sample per replay."""
    return [ms * 1000.0 / CALLS_PER_GRAPH for ms in timed(graph.replay, reps)]


def variants(compiled_sample, compiled_logits):
    default = {"triton": None}
    warps = {f"triton_w{w}": w for w in (2, 4, 8, 16)}
    out = {
        "torch_eager": lambda x, p, q: reference(ref.sample, ref.first_code_logits, x, p, q),
        "torch_compiled": lambda x, p, q: reference(compiled_sample, compiled_logits, x, p, q),
    }
    for name, w in {**default, **warps}.items():
        out[name] = lambda x, p, q, w=w: kern.sample(x, *p, **q, num_warps=w)
    return out


def time_all(device, reps: int, gen, batches=(1, 8, 32, 128, 256), vocabs=(2048, 3072)) -> dict:
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.cache_size_limit = 64
    opts = dict(dynamic=True, fullgraph=False)
    fns = variants(torch.compile(ref.sample, **opts), torch.compile(ref.first_code_logits, **opts))
    results = {}
    for B, V, (pname, setting) in itertools.product(batches, vocabs, PARAM_SETS.items()):
        logits = (torch.randn(B, V, generator=gen) * 3.0).to(torch.bfloat16).to(device)
        params = uniform_params(B, setting, device, gen)
        talker = max(vocabs) == V  # the talker samples with its logits processors
        procs = processors(B, V, device, gen) if talker else {}
        want = reference(ref.sample, ref.first_code_logits, logits, params, procs)
        for name, fn in fns.items():
            key = f"B{B}_V{V}_{pname}_{name}"
            try:
                bad = mismatches(fn(logits, params, procs), want)
                graph, outs = capture(
                    lambda fn=fn, x=logits, p=params, q=procs: fn(x, p, q), CALLS_PER_GRAPH
                )
                bad += sum(mismatches(o, want) for o in outs)
                samples = time_replays(graph, reps)
                results[key] = {
                    "B": B,
                    "V": V,
                    "params": pname,
                    "variant": name,
                    "mismatches": bad,
                    "median_us": statistics.median(samples),
                    "samples_us": samples,
                }
                del graph, outs
            except Exception:
                results[key] = {"B": B, "V": V, "params": pname, "variant": name}
                results[key]["error"] = traceback.format_exc()
    return results


def table(timings: dict) -> str:
    names = ["torch_eager", "torch_compiled", "triton", "triton_w2", "triton_w4", "triton_w8"]
    names.append("triton_w16")
    lines = [f"{'B':>4} {'V':>5} {'params':>9} " + " ".join(f"{n[-14:]:>14}" for n in names)]
    rows = {}
    for r in timings.values():
        cell = "ERR" if "error" in r else f"{r['median_us']:.1f}" + ("!" if r["mismatches"] else "")
        rows.setdefault((r["B"], r["V"], r["params"]), {})[r["variant"]] = cell
    for (B, V, p), cells in rows.items():
        lines.append(f"{B:>4} {V:>5} {p:>9} " + " ".join(f"{cells.get(n, '-'):>14}" for n in names))
    lines.append("us per call (median of graph replays / 16); '!' = ids differ from eager")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gen = torch.Generator().manual_seed(0)
    result = {
        "machine": torch.cuda.get_device_name() if device.type == "cuda" else platform.node(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "calls_per_graph": CALLS_PER_GRAPH,
    }
    path = os.path.join(args.out, "kernel_sampling.json")
    try:
        result["correctness"] = check_correctness(device, args.smoke, gen)
        print(json.dumps(result["correctness"], indent=1))
        if device.type == "cuda" and not args.smoke:
            result["timings"] = time_all(device, args.reps, gen)
    except Exception:
        result["error"] = traceback.format_exc()
        print(result["error"])
    finally:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
    if "timings" in result:
        print(table(result["timings"]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
