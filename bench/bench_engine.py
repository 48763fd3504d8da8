#!/usr/bin/env python3
"""The engine benchmark (`ttsfleet bench`, ttsfleet_runtime/benchmark.py) from a
checkout, with the optional graph-parity check first.

Usage (on the GPU machine, from the repository root):
    PYTHONPATH=runtime python3 bench/bench_engine.py --out DIR --sizes 1.7B,0.6B --frames 120 --parity
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ttsfleet_runtime import benchmark  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    benchmark.add_arguments(ap)
    ap.add_argument("--parity", action="store_true", help="first check graphed GPU == eager CPU codes")
    args = ap.parse_args()
    before = []
    if args.parity:
        from check_graph_parity import main as parity

        before.append(parity)
    raise SystemExit(benchmark.run(args, before))
