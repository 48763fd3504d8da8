#!/usr/bin/env python3
"""The error of the codec activation's sine on the GPU: the hardware sine (`fast_sinf`,
PTX sin.approx.f32) of the argument as it is, squared, against float64 sin^2, over
|z| <= each of --ranges (uniform samples). kernels/conv1d.py `_snake` relies on it: no
range reduction of its own.

Reported per range: the largest absolute error and that error per unit of |z| (the
float32 rounding of the argument grows so). Writes --out/snake_sine.json (when, where,
versions, the figures).

    PYTHONPATH=runtime python3 bench/snake_sine.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from ttsfleet_runtime.benchmark import report_start


@triton.jit
def _sine_squared_kernel(z_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    s = libdevice.fast_sinf(tl.load(z_ptr + i, mask=mask))
    tl.store(out_ptr + i, s * s, mask=mask)


def sine_errors(limit: float, samples: int, seed: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    z = ((torch.rand(samples, device="cuda", generator=g) * 2 - 1) * limit).float()
    got = torch.empty_like(z)
    _sine_squared_kernel[(triton.cdiv(samples, 1024),)](z, got, samples, BLOCK=1024)
    error = (got.double() - torch.sin(z.double()).square()).abs()
    worst = error.max().item()
    return dict(limit=limit, samples=samples, max_abs_error=worst, per_unit_of_z=worst / limit)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--ranges", type=float, nargs="+", default=[3.1416, 100.0, 315.0, 1000.0, 10000.0]
    )
    parser.add_argument("--samples", type=int, default=1 << 24)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("snake_sine: needs a CUDA GPU (the hardware sine is what it measures)")
    report = report_start(args, triton=triton.__version__)
    report["ranges"] = [sine_errors(r, args.samples, seed=i) for i, r in enumerate(args.ranges)]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "snake_sine.json").write_text(json.dumps(report, indent=1))
    for row in report["ranges"]:
        print(f"|z| <= {row['limit']:>9g}: max error {row['max_abs_error']:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
