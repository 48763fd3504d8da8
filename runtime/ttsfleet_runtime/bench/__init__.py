"""The runtime's benchmarks, one module each, behind one command:

    ttsfleet-runtime bench [OPTIONS]          the engine (`engine.py`; also `bench engine`)
    ttsfleet-runtime bench capacity ...       serve + loadtest per model size (`capacity.py`)
    ttsfleet-runtime bench startup ...        process start -> ready, cold and warm (`startup.py`)
    ttsfleet-runtime bench agents ...         serve + voice agents over the WebSocket (`agents.py`)
    ttsfleet-runtime bench summarise ...      bench/results/summary.json from the raw runs

(`python -m ttsfleet_runtime bench ...` is the same.) Each module has `add_arguments(ap)`
and `run(args) -> int`. The CLIs build every parser at start, the operator's too, in an
image that has only the operator's dependencies: a benchmark module imports the standard
library alone at the top, and what it runs with (httpx, torch, the load test) where it
runs (tests/packaging/test_extras.py).
They reach the runtime only through its public names; nothing in the runtime imports this
package (import-linter contracts in pyproject.toml). docs/benchmarks.md says which run is
behind each published figure.
"""

from __future__ import annotations

import argparse
import importlib

# Command name -> (module, one line of help). The engine's options also work without a
# name: `bench --sizes 1.7B ...` is `bench engine --sizes 1.7B ...`.
BENCHMARKS = {
    "engine": ("engine", "time the engine on this GPU (ms per frame, TTFA, throughput)"),
    "capacity": ("capacity", "one GPU's capacity per model size: serve + loadtest over HTTP"),
    "startup": ("startup", "process start -> ready of `serve`, cold and warm compile cache"),
    "agents": ("agents", "voice agents: serve + text streamed over the WebSocket, per level"),
    "summarise": ("summarise", "bench/results/summary.json from one device run's raw files"),
}


def benchmark(name: str):
    """The module of the benchmark called `name` on the command line."""
    return importlib.import_module(f"{__name__}.{BENCHMARKS[name][0]}")


def register(subparsers) -> None:
    """Add `bench` and its benchmarks to a CLI's subcommands; the handler runs the one named
    (the engine when none is)."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmarks: the engine (default), capacity, startup, agents, summarise",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1].split("\n\n")[0],
        # Only what was given: under a benchmark's name its own parser fills the rest.
        argument_default=argparse.SUPPRESS,
    )
    benchmark("engine").add_arguments(parser)
    parser.set_defaults(handler=_run)
    names = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    for name, (_module, help_line) in BENCHMARKS.items():
        benchmark(name).add_arguments(names.add_parser(name, help=help_line, description=help_line))


# What the CLIs above keep in the namespace besides a benchmark's options.
CLI_KEYS = ("command", "benchmark", "handler")


def options(args: argparse.Namespace) -> tuple[str, argparse.Namespace]:
    """The benchmark the command line named and its options alone (the engine's defaults
    under what was given when none was named)."""
    name = getattr(args, "benchmark", None) or "engine"
    given = {k: v for k, v in vars(args).items() if k not in CLI_KEYS}
    if getattr(args, "benchmark", None):
        return name, argparse.Namespace(**given)
    parser = argparse.ArgumentParser(add_help=False)
    benchmark(name).add_arguments(parser)
    chosen = parser.parse_args([])
    vars(chosen).update(given)
    return name, chosen


def _run(args: argparse.Namespace) -> int:
    name, chosen = options(args)
    return benchmark(name).run(chosen)
