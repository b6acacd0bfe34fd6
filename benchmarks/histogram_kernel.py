"""The histogram kernel's CPU twin against numpy.histogram, side by side in one run.

Both count the same uniform random float64 values into 256 bins over [lo, hi]:

- numpy:  numpy.histogram(x, bins=256, range=(lo, hi))   (one thread)
- twin:   daskgpu.kernels.histogram.histogram(x, lo, hi, 256)   (numba, all threads)

Each is timed after a warm-up (the twin's warm-up includes its one compilation); the median of
``--repeat`` runs is reported with the ratio and the target (twin >= 4x numpy). The counts must
be equal. Usage:

    python -m benchmarks.histogram_kernel [--size 100000000] [--repeat 3] [--bins 256]
"""

from __future__ import annotations

import argparse
import statistics
import sys

import numba
import numpy as np

from benchmarks.harness import summary, timed
from daskgpu.kernels.histogram import histogram

TARGET = 4.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000_000, help="number of float64 values")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (median)")
    parser.add_argument("--bins", type=int, default=256)
    args = parser.parse_args()

    lo, hi = 0.0, 1.0
    x = np.random.default_rng(42).uniform(lo, hi, size=args.size)
    print(f"{args.size:_} float64 uniform in [{lo}, {hi}), {args.bins} bins, "
          f"median of {args.repeat} after a warm-up; numba threads: {numba.get_num_threads()}")

    numpy_times, (expected, _) = timed(
        lambda: np.histogram(x, bins=args.bins, range=(lo, hi)), args.repeat)
    twin_times, got = timed(lambda: histogram(x, lo, hi, args.bins), args.repeat)

    equal = bool(np.array_equal(got[:-1], expected)) and got[-1] == 0
    ratio = statistics.median(numpy_times) / statistics.median(twin_times)
    print(f"numpy.histogram : {summary(numpy_times)}")
    print(f"CPU twin        : {summary(twin_times)}")
    print(f"ratio           : {ratio:.1f}x  (target >= {TARGET:.0f}x: "
          f"{'met' if ratio >= TARGET else 'NOT met'})")
    print(f"counts equal    : {equal}  (total {int(got[:-1].sum()):_}, NaN {int(got[-1])})")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
