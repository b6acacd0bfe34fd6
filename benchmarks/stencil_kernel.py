"""One heat-diffusion step: the parallel CPU twin against NumPy slicing, side by side in one run.

Times one explicit 5-point step on an n x n float64 grid (default window: all but the outer
ring), median of ``--repeat`` runs after one warm-up (which also compiles the twin):

- numpy:  ``stencil.heat_step_numpy`` (array slicing, one thread, several temporaries)
- twin:   ``stencil.heat_steps(u, alpha, 1)`` (``numba.njit(parallel=True)``, one fused pass)

Prints both, the ratio numpy / twin against the target (>= 2x), and checks that the results
agree. Usage:

    python -m benchmarks.stencil_kernel [--size 8000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

from benchmarks.harness import machine, summary, timed
from daskgpu.kernels import stencil

TARGET = 2.0
ALPHA = 0.2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.size, args.repeat
    print(f"one heat step on {n} x {n} float64 ({n * n * 8 / 1e9:.2f} GB), {machine()}, "
          f"median of {repeat}\n")

    u = np.random.default_rng(0).random((n, n))
    numpy_t, ref = timed(lambda: stencil.heat_step_numpy(u, ALPHA), repeat)
    twin_t, got = timed(lambda: stencil.heat_steps(u, ALPHA, 1), repeat)

    print(f"  NumPy slicing (heat_step_numpy)  {summary(numpy_t)}")
    print(f"  CPU twin (heat_steps, 1 step)    {summary(twin_t)}")
    ratio = statistics.median(numpy_t) / statistics.median(twin_t)
    verdict = "met" if ratio >= TARGET else "NOT met"
    print(f"\n  NumPy / twin  {ratio:5.2f}x   (target >= {TARGET:g}x: {verdict})")
    diff = float(np.max(np.abs(got - ref)))
    agree = np.allclose(got, ref, rtol=1e-12, atol=0.0)
    print(f"  results agree: {agree}  (max abs difference {diff:.3g})")
    if not agree:
        sys.exit(1)


if __name__ == "__main__":
    main()
