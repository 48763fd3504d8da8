"""What the benchmarks share: the text they speak, a run's clock and budget, CUDA-event
timing, the machine facts every result records, the random checkpoints they write, and
the section loop that keeps a run's JSON written whatever fails."""

from __future__ import annotations

import datetime
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

# The text every benchmark speaks; the peer harness (bench/peers/) imports it from here.
TEXT = (
    "The quick brown fox jumps over the lazy dog while the orchestra tunes up in the hall; "
    "meanwhile, a patient engineer measures every millisecond of latency, because streaming "
    "speech must start quickly and never stall."
)


class Budget:
    """One run's clock: seconds since it started, seconds left of `seconds`, and log
    lines stamped with the former. Each run makes its own, so two runs in one process
    (tests) never share a start time."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = time.monotonic()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def left_s(self) -> float:
        return self.seconds - self.elapsed_s()

    def log(self, *parts) -> None:
        print(f"[{self.elapsed_s():7.1f}s]", *parts, flush=True)


def timed(fn, iters: int) -> list[float]:
    """Milliseconds per call: a CUDA-event pair per call on the GPU, a clock on the CPU."""
    import torch

    samples = []
    for _ in range(iters):
        if not torch.cuda.is_available():
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def git_commit(checkout: Path) -> dict:
    """The commit of the checkout at `checkout` and whether it has local changes; why
    not, where it is no git checkout (a copy of the tree on the device machine)."""
    try:
        run = lambda *a: subprocess.run(  # noqa: E731
            ["git", *a], cwd=checkout, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        return dict(commit=run("rev-parse", "HEAD"), dirty=bool(run("status", "--porcelain")))
    except Exception as e:
        return dict(commit=None, why=repr(e)[:200])


def machine_facts(device: str, checkout: Path) -> dict:
    """Where and with what a benchmark's numbers were taken: host, CPUs, Python, torch,
    CUDA and Triton versions, the GPU (None off `cuda`), the time, the command line and
    the commit of `checkout`. Every result JSON's `env` is this, so results from
    different scripts compare machine to machine."""
    import torch

    facts = dict(
        host=socket.gethostname(),
        cpus=os.cpu_count(),
        python=platform.python_version(),
        torch=torch.__version__,
        cuda=torch.version.cuda,
        date=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        command=" ".join(sys.argv),
        git=git_commit(checkout),
    )
    try:
        import triton

        facts["triton"] = triton.__version__
    except Exception as e:  # no Triton on this machine: the result still says so
        facts["triton"] = f"unavailable: {e!r}"[:200]
    facts["gpu"] = None
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        facts.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            sms=props.multi_processor_count,
            capability=f"{props.major}.{props.minor}",
        )
    return facts


def run_sections(
    todo: list,
    into: dict,
    *,
    budget: Budget,
    dump: Callable[[], None],
    label: str = "",
    describe=lambda r: {k: v for k, v in r.items() if k != "samples_ms"},
) -> None:
    """Each (key, section) of `todo` runs in order into `into[key]`, and `dump()` writes
    the JSON after it. A section that raises records its error and the rest still run;
    one due after the budget is spent is recorded as skipped. `budget.log(label + key,
    describe(result))` reports each."""
    for key, run in todo:
        if budget.left_s() < 0:
            into[key] = dict(skipped="time budget")
            continue
        try:
            into[key] = run()
            budget.log(label + key, describe(into[key]))
        except Exception as e:
            into[key] = dict(error=repr(e), traceback=traceback.format_exc()[-3000:])
            budget.log(label + key, "FAILED", traceback.format_exc())
        dump()


def add_tokenizer_rate_argument(ap) -> None:
    """`--tokenizer-rate`: which random checkpoint a benchmark writes and runs."""
    from ..checkpoint.sizes import TOKENIZER_RATES

    ap.add_argument(
        "--tokenizer-rate",
        type=int,
        choices=TOKENIZER_RATES,
        default=12,
        help="random checkpoints of this speech tokenizer rate (Hz)",
    )


def add_serve_arguments(ap, budget_s: float) -> None:
    """The options of a benchmark that serves a random checkpoint and loads it over HTTP:
    where it runs, its checkpoint folder, how long it may start, `serve` flags, a budget."""
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ckpt-dir", default="/tmp/ttsfleet-ckpt")
    ap.add_argument("--ready-timeout-s", type=float, default=300.0)
    ap.add_argument(
        "--serve-flag",
        action="append",
        default=[],
        help="one more `serve` argument, as --serve-flag=--max-queue --serve-flag=1024",
    )
    ap.add_argument("--budget-s", type=float, default=budget_s)


def checkpoint_path(size: str, args, variant: str = "CustomVoice") -> str:
    """Where the random checkpoint of `size`, `variant` and the tokenizer rate (the
    `--tokenizer-rate` of benchmarks that have one; else 12 Hz) lives, or `args.model`."""
    rate = getattr(args, "tokenizer_rate", 12)
    return args.model or os.path.join(args.ckpt_dir, f"Qwen3-TTS-{rate}Hz-{size}-{variant}-random")


def ready_checkpoint(size: str, args, variant: str = "CustomVoice") -> str:
    """`checkpoint_path(size, args, variant)`, first writing the random checkpoint of
    `size` and `variant` there (on `args.device`) when no `args.model` is given and none
    is there yet."""
    ckpt = checkpoint_path(size, args, variant)
    if not args.model and not os.path.exists(os.path.join(ckpt, "model.safetensors")):
        from ttsfleet_runtime.checkpoint.random_checkpoint import write_random_checkpoint

        write_random_checkpoint(
            ckpt,
            size,
            variant,
            seed=0,
            device=args.device,
            tokenizer_rate_hz=getattr(args, "tokenizer_rate", 12),
            progress=lambda m: None,
        )
    return ckpt
