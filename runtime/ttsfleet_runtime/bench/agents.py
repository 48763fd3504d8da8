"""Voice agents at scale, in one command: `ttsfleet serve` on a random checkpoint, then
`ttsfleet loadtest --protocol websocket --sessions ...` against it (issue 36).

  1. write the random checkpoint (`ttsfleet-runtime checkpoint --random --size SIZE`),
     unless present;
  2. serve it with --max-batch 256 --ws-max-sessions-per-key 4096 --auth disabled and
     --max-audio-seconds (random weights never stop: every utterance is that long); wait
     for the graphs it captures after ready (up to 60 s);
  3. run agent sessions at each level of --sessions (1,8,32,64,128,256): each streams a
     148-character reply as 4 characters every 25 ms, flushes, waits for its audio, three
     times; sessions start over 2 s and are spread over --client-processes processes.
Writes into --out: agents.json (machine, GPU, versions, the serve command, per level TTFA
from the first delta p50/p95/p99 and stalls, without samples), loadtest.json (every
utterance's samples), the server log. Goal (issue 36): 256 sessions p95 <= 80 ms, no
stall; 1 session <= 30 ms.

    python3 -m ttsfleet_runtime bench agents --out $OUT
    python3 -m ttsfleet_runtime bench agents --out /tmp/a --size tiny --device cpu --sessions 1,4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from .common import Budget, add_serve_arguments, add_tokenizer_rate_argument

RESULT = "agents.json"


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", default="1.7B", help="the random checkpoint's size (tiny on CPU)")
    add_tokenizer_rate_argument(ap)
    ap.add_argument("--sessions", default="1,8,32,64,128,256", help="levels, one after another")
    ap.add_argument("--client-processes", type=int, default=8)
    ap.add_argument("--delta-chars", type=int, default=4)
    ap.add_argument("--delta-interval-ms", type=float, default=25.0)
    ap.add_argument("--reply-chars", type=int, default=148)
    ap.add_argument("--utterances-per-session", type=int, default=3)
    ap.add_argument("--ramp-s", type=float, default=2.0)
    # Random weights never stop: every utterance is --max-audio-seconds long. 10 s is about
    # what a 148-character reply speaks, so its text ends before its audio does (4 s ended
    # each utterance while its text was still being sent).
    ap.add_argument("--utterance-s", type=float, default=10.0, help="serve --max-audio-seconds")
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--max-ttfa-p95-ms", type=float, default=80.0, help="a level passes below")
    add_serve_arguments(ap, budget_s=480.0)


def run(args: argparse.Namespace) -> int:
    from ttsfleet_runtime.loadtest.agents import AgentPlan
    from ttsfleet_runtime.loadtest.command import write_result
    from ttsfleet_runtime.loadtest.runner import LoadConfig, run_load
    from ttsfleet_runtime.loadtest.serve_process import (
        Server,
        report_head,
        report_saver,
        wait_background,
    )
    from ttsfleet_runtime.loadtest.texts import builtin_texts
    from ttsfleet_runtime.loadtest.timings import Thresholds

    from .capacity import without_samples, write_checkpoint

    args.out.mkdir(parents=True, exist_ok=True)
    report = report_head("agents", args)
    budget = Budget(args.budget_s)
    save = report_saver(report, args.out / RESULT, started=budget.started)
    options = argparse.Namespace(**vars(args), budget=budget)
    report["checkpoint"] = write_checkpoint(args.size, options, args.out)
    ckpt = report["checkpoint"]["checkpoint"]
    budget.log(f"checkpoint {ckpt}")
    save()
    flags = ["--ws-max-sessions-per-key", "4096", *args.serve_flag]
    options.serve_flag = flags
    server = Server(options, ckpt, args.out / "serve.log", args.max_batch, args.utterance_s)
    report["serve_command"] = server.command
    try:
        report["ready_s"] = server.wait_ready(min(args.ready_timeout_s, budget.left_s()))
        report["capture_background_s"] = wait_background(server.base, min(60.0, budget.left_s()))
        budget.log(f"server ready in {report['ready_s']} s")
        config = LoadConfig(
            url=server.base,
            texts=builtin_texts(args.utterance_s),
            protocol="websocket",
            sessions=[int(n) for n in args.sessions.split(",")],
            agent_plan=AgentPlan(
                delta_chars=args.delta_chars,
                delta_interval_s=args.delta_interval_ms / 1000,
                reply_chars=args.reply_chars,
                utterances=args.utterances_per_session,
                ramp_s=args.ramp_s,
                client_processes=args.client_processes,
            ),
            thresholds=Thresholds(ttfa_p95_ms=args.max_ttfa_p95_ms),
            timeout_s=max(60.0, budget.left_s()),
            progress=lambda line: budget.log(json.dumps(line)),
        )
        result = asyncio.run(run_load(config))
    except Exception as exc:
        report["error"] = repr(exc)[:2000]
        save()
        raise
    finally:
        server.stop()
    result["serve_command"] = server.command
    write_result(result, args.out)
    report["agents"] = without_samples(result)
    report["samples_in"] = "loadtest.json"
    report["wall_s"] = round(time.monotonic() - budget.started, 1)
    save()
    from ttsfleet_runtime.loadtest.command import agents_table

    print(agents_table(result))
    print(f"wrote {args.out / RESULT}")
    return 0
