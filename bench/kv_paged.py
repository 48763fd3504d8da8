"""The paged KV cache on the GPU: memory at max_batch 256, and the decode step's time.

Starts the talker's `ModelRunner` (no codec) of a random checkpoint at real size
(`ttsfleet-runtime bench`'s folder, written if missing) with `--max-batch` (256)
and the default KV budget, and reports the pool (GiB, blocks, bytes per position,
per 10-second stream, how many such streams it holds) and the GPU memory after
start-up and after the graphs. Before timing it checks the paged kernels at the
real shapes against their eager definitions (a shuffled block table, lengths
across block boundaries). Then it times the captured decode step (CUDA events,
`--replays` replays, median) at each batch in `--batches`, every row holding
`--live-len` positions in blocks of its own, interleaved as streams growing
together get them. Before the paged cache (static per-slot cache, same H100,
1.7B): 4.24 / 5.81 / 7.02 ms at B = 1 / 32 / 128.

JSON goes to `--out/kv_paged.json` after every section (a failing section records
its error, the rest still run; sections past `--budget-s` are skipped); a short
table is printed last. On the GPU machine, from the repository root:

    PYTHONPATH=runtime python3 bench/kv_paged.py --out $OUT
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import traceback

import torch

from ttsfleet_runtime.benchmark import json_writer, report_start, run_sections

T0 = time.time()
BEFORE_MS = {1: 4.24, 32: 5.81, 128: 7.02}  # static cache, 1.7B, H100 (issue 12)


def log(*parts) -> None:
    print(f"[{time.time() - T0:6.1f}s]", *parts, flush=True)


def start_runner(args):
    from ttsfleet_runtime.benchmark import ready_checkpoint
    from ttsfleet_runtime.engine.model_runner import ModelRunner
    from ttsfleet_runtime.model.weights import load_model

    ckpt = ready_checkpoint(args.size, args)
    model = load_model(ckpt, args.device, args.dtype, max_positions=args.max_len)
    weights = torch.cuda.memory_allocated() if args.device == "cuda" else 0
    runner = ModelRunner(
        model,
        max_batch=args.max_batch,
        max_len=args.max_len,
        max_text=1024,
        device=args.device,
        cuda_graphs=args.device == "cuda",
        kv_cache_memory=args.kv_cache_memory,
    )
    return runner, weights


def memory_section(runner, weights: int) -> dict:
    from ttsfleet_runtime.engine.kv_blocks import MIN_STREAM_SECONDS, stream_blocks

    cache = runner.cache
    usable = cache.num_blocks - 1
    per_block = cache.bytes_per_block
    per_stream = stream_blocks(MIN_STREAM_SECONDS, cache.block_size) * per_block
    r = dict(
        max_batch=runner.max_batch,
        max_len=runner.max_len,
        block_positions=cache.block_size,
        kv_blocks=usable,
        kv_pool_gib=round(cache.num_blocks * per_block / 2**30, 2),
        kv_bytes_per_position=per_block // cache.block_size,
        kv_bytes_per_10s_stream=per_stream,
        streams_of_10s_that_fit=usable * per_block // per_stream,
        streams_of_60s_that_fit=usable // stream_blocks(60, cache.block_size),
        block_table_bytes=cache.block_table.numel() * 4,
        weights_gib=round(weights / 2**30, 2),
    )
    if torch.cuda.is_available():
        r["allocated_gib"] = round(torch.cuda.memory_allocated() / 2**30, 2)
        r["free_gib"] = round(torch.cuda.mem_get_info()[0] / 2**30, 2)
    return r


def relative_error(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm()).item()


def kernel_check(runner, live_len: int) -> dict:
    """The paged kernels at the talker's shapes against their eager definitions, on a
    copy of layer 0's pool with a shuffled table."""
    from ttsfleet_runtime.kernels.decode_attention import decode_attention
    from ttsfleet_runtime.kernels.rope_kv import qk_norm_rope_write
    from ttsfleet_runtime.model import layers

    cfg, cache, device = runner.cfg, runner.cache, runner.device
    B = min(runner.max_batch, 64)
    K, d, H = cfg.num_key_value_heads, cfg.head_dim, cfg.num_attention_heads
    page, dtype = cache.block_size, cache.k.dtype
    width = -(-live_len // page)
    g = torch.Generator(device=device).manual_seed(0)
    randn = lambda *shape: torch.randn(*shape, generator=g, device=device).to(dtype)  # noqa: E731
    # A pool twice what the rows hold, their blocks anywhere in it.
    blocks = 2 * B * width
    table = torch.randperm(blocks, generator=g, device=device)[: B * width]
    table = table.view(B, width).to(torch.int32)
    k_pool, v_pool = randn(blocks, K, page, d), randn(blocks, K, page, d)
    lengths = torch.randint(1, live_len + 1, (B,), generator=g, device=device)
    q = randn(B, H, d)
    out = decode_attention(q, k_pool, v_pool, lengths, block_table=table)
    ref = layers.decode_attention_eager(
        q.float(), k_pool.float(), v_pool.float(), lengths, block_table=table
    )
    r = dict(attention_rel_error=relative_error(out, ref))
    qkv = randn(B, (H + 2 * K) * d)
    weight = torch.ones(d, device=device, dtype=dtype)
    rope = runner.talker.stack.rope
    positions = lengths - 1
    k_eager, v_eager = k_pool.clone(), v_pool.clone()
    args = (qkv, weight, weight, rope.cos, rope.sin, positions)
    q_eager = layers.qk_norm_rope_write_eager(*args, k_eager, v_eager, 1e-6, block_table=table)
    q_kernel = qk_norm_rope_write(*args, k_pool, v_pool, 1e-6, block_table=table)
    rows = torch.arange(B, device=device)
    where = (table[rows, positions // page].long(), slice(None), positions % page)
    r["rope_q_rel_error"] = relative_error(q_kernel, q_eager)
    r["rope_k_rel_error"] = relative_error(k_pool[where], k_eager[where])
    r["rope_v_equal"] = bool(torch.equal(v_pool, v_eager))
    r["ok"] = (
        r["attention_rel_error"] < 2e-2
        and r["rope_q_rel_error"] < 2e-2
        and r["rope_k_rel_error"] < 2e-2
        and r["rope_v_equal"]
    )
    return r


def step_section(runner, batch: int, live_len: int, replays: int) -> dict:
    from ttsfleet_runtime.benchmark import restore_kv_blocks, spread_kv_blocks, timed

    B = runner.bucket(batch)
    t = time.time()
    graph = runner.graphs.get(B) or runner.capture(B)
    capture_s = round(time.time() - t, 2)
    saved_position = runner.state.position.clone()
    saved_blocks = spread_kv_blocks(runner, batch, live_len)
    try:
        runner.state.position[:batch] = live_len - 1
        runner.state.active.zero_()  # replays advance nothing
        for _ in range(5):
            graph.replay()
        samples = [round(ms, 4) for ms in timed(graph.replay, replays)]
    finally:
        runner.state.position.copy_(saved_position)
        restore_kv_blocks(runner, saved_blocks)
    return dict(
        batch=batch,
        bucket=B,
        live_len=live_len,
        capture_s=capture_s,
        graph_ms=round(statistics.median(samples), 3),
        samples_ms=samples,
        before_ms=BEFORE_MS.get(batch),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=200.0)
    ap.add_argument("--size", default="1.7B")
    ap.add_argument("--model", default="", help="a checkpoint folder instead of a random one")
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=4608)
    ap.add_argument("--kv-cache-memory", type=float, default=0.5)
    ap.add_argument("--live-len", type=int, default=200)
    ap.add_argument("--batches", default="1,32,128,256")
    ap.add_argument("--replays", type=int, default=50)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import triton

    results = report_start(args, triton=triton.__version__)
    dump = json_writer(os.path.join(args.out, "kv_paged.json"), results)

    sections = results["sections"]
    runner = None
    try:
        t = time.time()
        runner, weights = start_runner(args)
        results["start_s"] = round(time.time() - t, 1)
        sections["memory"] = memory_section(runner, weights)
        log("memory", sections["memory"])
    except Exception as e:
        results["error"] = repr(e)
        results["traceback"] = traceback.format_exc()[-3000:]
        log("start FAILED", traceback.format_exc())
    dump()
    if runner is not None:
        todo = [("kernel_check", lambda: kernel_check(runner, args.live_len))]
        todo += [
            (f"step_B{b}", lambda b=b: step_section(runner, b, args.live_len, args.replays))
            for b in sorted((int(x) for x in args.batches.split(",")), reverse=True)
        ]
        with torch.inference_mode():
            run_sections(todo, sections, started=T0, budget_s=args.budget_s, dump=dump, log=log)
        if torch.cuda.is_available():
            sections["memory"]["after_graphs_allocated_gib"] = round(
                torch.cuda.memory_allocated() / 2**30, 2
            )
            sections["memory"]["max_reserved_gib"] = round(
                torch.cuda.max_memory_reserved() / 2**30, 2
            )
    results["seconds"] = round(time.time() - T0, 1)
    dump()
    print_table(results)


def print_table(results: dict) -> None:
    s = results["sections"]
    m = s.get("memory", {})
    print(f"\n{results['args']['size']} paged KV, {results.get('gpu')}")
    if "error" in results:
        print("start failed:", results["error"])
        return
    print(
        f"pool {m.get('kv_pool_gib')} GiB, {m.get('kv_blocks')} blocks x "
        f"{m.get('block_positions')} positions, {m.get('kv_bytes_per_position', 0) // 1024} KiB "
        f"per position; 10 s stream {m.get('kv_bytes_per_10s_stream', 0) / 2**20:.1f} MiB; "
        f"fits {m.get('streams_of_10s_that_fit')} x 10 s, {m.get('streams_of_60s_that_fit')} "
        f"x 60 s; allocated {m.get('allocated_gib')} -> {m.get('after_graphs_allocated_gib')} GiB"
    )
    check = s.get("kernel_check", {})
    print(f"kernel check: {'ok' if check.get('ok') else check}")
    print(f"{'batch':>6} {'graph ms':>9} {'before':>7}")
    for key, r in s.items():
        if key.startswith("step_"):
            if "graph_ms" in r:
                before = r["before_ms"] if r["before_ms"] is not None else "-"
                print(f"{r['batch']:>6} {r['graph_ms']:>9.3f} {before:>7}")
            else:
                print(f"{key:>6} {r.get('error') or r.get('skipped')}")


if __name__ == "__main__":
    main()
