"""Build `bench/results/summary.json` from the raw files of one device run.

Inputs (any but the first may be missing):
- `ours.json` of `ttsfleet-runtime bench`: per size, our numbers as its `summarise`
  derives them (recomputed here from the raw runs, so the derivation has one home);
- `faster_qwen3_tts.json` of `bench/peers/bench_faster_qwen3_tts.py`: the peer's numbers
  (derived here; bench/peers/README.md says from which fields);
- `profile_step.json` of `bench/profile_step.py`: `kernels_per_step_b1`;
- `--codec`: `codec_scale.json` of `bench/codec_scale.py`: `codec_ms_b128_n8` (one codec
  for every size: the same value in each), the bf16 decode of 8 frames for 128 streams;
- `--capacity`: `capacity.json` of `bench capacity`: per size its `load` figures
  (`ttfa_p95_ms_at_10_rps`, `ttfa_p95_ms_at_20_rps`, `knee_rps`, `max_concurrent_streams`);
- `--startup`: `startup.json` of `bench startup`: per size `startup_s` (process start ->
  ready with a warm compile cache) and `startup_s_cold`.

Without `--ours`, `--startup`, `--capacity` and `--codec` update an existing summary
(--out) and change nothing else: a load figure the new run did not measure keeps the old
run's.

Speedups compare the peer with us on the same machine in the same run:
`speedup_ms_per_frame_b1` and `speedup_ttfa_ms_b1` are peer / ours (times faster),
`speedup_audio_s_per_s_max` is ours / peer (times the throughput).

    PYTHONPATH=runtime python3 -m ttsfleet_runtime bench summarise --ours $OUT/ours.json \\
        --peer $OUT/peers/faster_qwen3_tts.json --profile $OUT/profile_step.json \\
        --codec $OUT/codec_scale.json --capacity $OUT/capacity.json \\
        --startup $OUT/startup.json --out bench/results/summary.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .engine import summarise as summarise_ours

PEER = "faster_qwen3_tts"


def median(xs: list[float]) -> float | None:
    """The same median as the benchmark's (the upper one of an even count)."""
    return sorted(xs)[len(xs) // 2] if xs else None


def peer_summary(raw: dict) -> dict:
    """One size of faster_qwen3_tts.json -> the fields we compare."""
    single = raw.get("single", {})
    best: dict = {}
    for key, batch in raw.get("batch", {}).items():
        runs = batch.get("runs") or []
        rate = runs[-1].get("audio_s_per_s_incl_decode") if runs else None
        if rate is not None and rate > best.get("audio_s_per_s_max", 0):
            best = dict(audio_s_per_s_max=rate, batch_at_max=int(key.removeprefix("B")))
    return dict(
        ms_per_frame_b1=median([r["ms_per_frame"] for r in single.get("stream_text", [])]),
        ttfa_ms_b1=median([r["ttfa_ms"] for r in single.get("streaming_chunk1", [])]),
        **best,
    )


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def present(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def codec_ms_b128_n8(codec: dict | None) -> float | None:
    """ms of one bf16 codec decode of 8 frames for 128 streams, from codec_scale.json."""
    if not codec:
        return None
    if "codec_ms_b128_n8" in codec:
        return codec["codec_ms_b128_n8"]
    for row in codec.get("scale", []):  # graphs, bf16, the routed convolutions
        if row.get("batch") == 128 and row.get("frames") == 8 and "decode_ms" in row:
            return round(row["decode_ms"], 3)
    return None


def summarise(
    ours: dict,
    peer: dict | None,
    profile: dict | None,
    codec: dict | None = None,
    capacity: dict | None = None,
    startup: dict | None = None,
) -> dict:
    env = ours.get("env", {})
    sizes = {}
    for size, raw in ours.items():
        if not isinstance(raw, dict) or not ("single" in raw or "error" in raw):
            continue  # env, command, wall_s
        if "error" in raw:
            sizes[size] = dict(error=raw["error"])
            continue
        mine = summarise_ours(raw)
        kernels = (profile or {}).get("sizes", {}).get(size, {}).get("summary", {})
        mine["kernels_per_step_b1"] = kernels.get("kernels_per_step_b1")
        entry = dict(ours=present(mine))
        if peer and isinstance(peer.get(size), dict) and "single" in peer[size]:
            theirs = present(peer_summary(peer[size]))
            entry[PEER] = theirs
            entry |= present(
                dict(
                    speedup_ms_per_frame_b1=ratio(
                        theirs.get("ms_per_frame_b1"), mine["ms_per_frame_b1"]
                    ),
                    speedup_ttfa_ms_b1=ratio(theirs.get("ttfa_ms_b1"), mine["ttfa_ms_b1"]),
                    speedup_audio_s_per_s_max=ratio(
                        mine["audio_s_per_s_max"], theirs.get("audio_s_per_s_max")
                    ),
                )
            )
        elif peer and isinstance(peer.get(size), dict):
            entry[PEER] = dict(error=peer[size].get("error") or peer[size].get("skipped"))
        sizes[size] = entry
    codec_ms = codec_ms_b128_n8(codec)
    for size, run in ((capacity or {}).get("sizes") or {}).items():
        if isinstance(run, dict) and run.get("load"):
            sizes.setdefault(size, {})["load"] = run["load"]
    add_startup(sizes, startup)
    for entry in sizes.values():
        if codec_ms is not None and "error" not in entry:
            entry["codec_ms_b128_n8"] = codec_ms
    return dict(
        device=env.get("gpu"),
        date=env.get("date"),
        sizes=sizes,
        notes=(
            "random bf16 weights, fixed length (EOS suppressed); ours and the peer from one "
            "device run. Fields: docs/benchmarks.md; "
            "graphs / capture_s: every decode + prefill graph `ttsfleet serve` captures with its "
            "default settings and the seconds that takes; kernels_per_step_b1: GPU "
            "kernels of one eager decode step at batch 1 (bench/profile_step.py); codec_ms_b128_n8: "
            "one bf16 codec decode of 8 frames for 128 streams; load: `ttsfleet loadtest` over "
            "HTTP against `ttsfleet serve` (`ttsfleet-runtime bench capacity`, docs/capacity.md); "
            "startup_s / "
            "startup_s_cold: `ttsfleet serve` spawned -> /health/ready with a warm / empty "
            "--compile-cache-dir (`ttsfleet-runtime bench startup`)."
        ),
    )


def add_load(sizes: dict, capacity: dict | None) -> None:
    """Per size the `load` figures of a capacity.json into an existing summary's `sizes`:
    each figure the run measured replaces the old one; one it did not (None: a rate it
    did not run, no burst) keeps the old run's."""
    for size, run in ((capacity or {}).get("sizes") or {}).items():
        figures = present((run or {}).get("load") or {})
        if figures:
            sizes.setdefault(size, {}).setdefault("load", {}).update(figures)


def add_startup(sizes: dict, startup: dict | None) -> None:
    """Per size `startup_s` / `startup_s_cold` of a startup.json, into `sizes`."""
    for size, run in ((startup or {}).get("sizes") or {}).items():
        figures = present({k: (run or {}).get(k) for k in ("startup_s", "startup_s_cold")})
        if figures:
            sizes.setdefault(size, {}).update(figures)


def add_codec(sizes: dict, codec: dict | None) -> None:
    """`codec_ms_b128_n8` of a codec benchmark into every size of `sizes` (one codec)."""
    codec_ms = codec_ms_b128_n8(codec)
    if codec_ms is not None:
        for entry in sizes.values():
            entry["codec_ms_b128_n8"] = codec_ms


def load(path: str | None) -> dict | None:
    return json.loads(Path(path).read_text()) if path else None


def load_optional(path: str | None) -> dict | None:
    """A file the summary can do without: missing or unreadable, it is left out (said so)."""
    try:
        return load(path)
    except (OSError, ValueError) as exc:
        print(f"leaving out {path}: {exc}", file=sys.stderr)
        return None


def merge_capacity(runs: list[dict | None]) -> dict | None:
    """capacity.json files as one: sizes from every file (a device run split by size).
    Where two files have a size, the first one's load figures stand and a later one only
    fills those the first lacks (None: a rate it did not run, no burst), e.g. the
    concurrent streams of a burst another run measured."""
    runs = [run for run in runs if run]
    if not runs:
        return None
    sizes: dict = {}
    for run in runs:
        for size, entry in (run.get("sizes") or {}).items():
            if size not in sizes:
                sizes[size] = entry
                continue
            kept = sizes[size] or {}
            load = ((entry or {}).get("load") or {}) | present(kept.get("load") or {})
            sizes[size] = kept | {"load": load}
    return runs[0] | {"sizes": sizes}


def add_rate_block(args: argparse.Namespace) -> int:
    """Each size's figures at another tokenizer rate, as a block beside the 12 Hz ones
    (`"25Hz": {ours, load, startup_s, ...}`): no peer serves that rate to compare."""
    if not args.ours or args.peer or args.codec:
        print(
            "a rate block takes --ours (with --profile, --capacity, --startup) and no "
            "--peer or --codec",
            file=sys.stderr,
        )
        return 2
    ours: dict = {}
    for path in args.ours:
        ours = load(path) | ours
    block = summarise(
        ours,
        None,
        load_optional(args.profile),
        capacity=merge_capacity([load_optional(path) for path in args.capacity]),
        startup=load_optional(args.startup) if args.startup else None,
    )
    summary = json.loads(Path(args.out).read_text())
    for size, entry in block["sizes"].items():
        summary["sizes"].setdefault(size, {})[f"{args.tokenizer_rate}Hz"] = entry
        print(size, f"{args.tokenizer_rate}Hz", json.dumps(entry))
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--ours",
        action="append",
        help="ours.json of `bench engine` (again for a run split by size); "
        "without it, --startup's, --capacity's and --codec's figures go into the existing "
        "--out and nothing else changes",
    )
    ap.add_argument("--peer", help="faster_qwen3_tts.json of bench/peers/")
    ap.add_argument("--profile", help="profile_step.json of bench/profile_step.py")
    ap.add_argument("--codec", help="codec_scale.json of bench/codec_scale.py (codec_ms_b128_n8)")
    ap.add_argument(
        "--capacity",
        action="append",
        default=[],
        help="capacity.json of `bench capacity` (load figures; again for a run split by size)",
    )
    ap.add_argument("--startup", help="startup.json of `bench startup` (startup_s per size)")
    ap.add_argument(
        "--tokenizer-rate",
        type=int,
        default=12,
        help="the runs' speech tokenizer rate: other than 12, their figures (--ours, "
        "--profile, --capacity, --startup) become each size's `<rate>Hz` block in the "
        "existing --out, the 12 Hz figures untouched",
    )
    ap.add_argument("--out", default="bench/results/summary.json")


def run(args: argparse.Namespace) -> int:
    if args.tokenizer_rate != 12:
        return add_rate_block(args)
    if not args.ours:
        # Start-up, capacity and the codec are timed in leases of their own (fresh server
        # processes, not the engine benchmark's): their figures join the summary of the
        # engine run.
        if not (args.startup or args.capacity or args.codec):
            print(
                "give --ours, or --startup / --capacity / --codec to add figures to --out",
                file=sys.stderr,
            )
            return 2
        summary = json.loads(Path(args.out).read_text())
        add_startup(summary["sizes"], load(args.startup))
        add_codec(summary["sizes"], load(args.codec))
        add_load(summary["sizes"], merge_capacity([load(path) for path in args.capacity]))
        Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
        return 0
    ours: dict = {}
    for path in args.ours:  # sizes from every file; env and the rest from the first
        ours = load(path) | ours
    summary = summarise(
        ours,
        load(args.peer),
        load(args.profile),
        load_optional(args.codec),
        merge_capacity([load_optional(path) for path in args.capacity]),
        load_optional(args.startup) if args.startup else None,
    )
    Path(args.out).write_text(json.dumps(summary, indent=1) + "\n")
    for size, entry in summary["sizes"].items():
        print(size, json.dumps(entry))
    return 0
