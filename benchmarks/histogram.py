"""histogram-pipeline on a ``.npy`` file against fast-histogram and numpy.histogram.

    python -m benchmarks.histogram [--values 100000000] [--bins 256] [--rounds 5]

One float64 ``.npy`` file of uniform [0, 1) values (written once, kept in the temporary
directory), binned into ``--bins`` bins over [0, 1) by three contenders, in alternating rounds:

- histogram-pipeline: ``daskgpu.run(..., input=FILE, range=(0, 1))`` on ``daskgpu.cluster``
  (CPU) of ``--workers`` single-threaded workers (2 x 1 measured fastest on 2 cores: one worker
  of two threads runs two blocks at once, each on two Numba threads); its ``compute_s``, each
  run also verified (outside ``compute_s``);
- fast-histogram: ``np.load(FILE)`` then ``fast_histogram.histogram1d`` (0.14 has no threads
  option: its plain, single-threaded call; also shown split in two halves over two Python
  threads, which it allows by releasing the GIL);
- numpy: ``np.load(FILE)`` then ``numpy.histogram``.

Every contender's first call is a warm-up (the file is then in the page cache for all). The
counts must agree (the pipeline's equal numpy's exactly; fast-histogram's may differ by values
within rounding of an edge) before the ratios of the medians are printed. The peers are
imported only here: ``pip install -e .[bench]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.harness import machine

TARGET = 1.0
# fast-histogram bins by multiplying with 1 / width, numpy by dividing and correcting against
# its edges: a value within rounding of an edge may land one bin apart.
EDGE_TOLERANCE = 1e-7


def _input_file(values: int) -> str:
    path = os.path.join(tempfile.gettempdir(), f"daskgpu-bench-histogram-{values}.npy")
    expected = 128 + 8 * values
    if not os.path.exists(path) or os.path.getsize(path) != expected:
        print(f"writing {values:_} float64 values to {path} ...", flush=True)
        np.save(path, np.random.default_rng(42).random(values))
    return path


def _peers():
    try:
        import fast_histogram
    except ImportError:
        raise SystemExit("fast-histogram is not installed: pip install -e .[bench]") from None
    return fast_histogram


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=100_000_000)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--chunks", default="auto")
    args = parser.parse_args()
    fast_histogram = _peers()
    import daskgpu

    path, bins = _input_file(args.values), args.bins

    def fast_plain():
        return fast_histogram.histogram1d(np.load(path), bins, (0.0, 1.0))

    def fast_two_threads():
        x = np.load(path)
        half = x.shape[0] // 2
        with ThreadPoolExecutor(2) as pool:
            parts = pool.map(lambda part: fast_histogram.histogram1d(part, bins, (0.0, 1.0)),
                             (x[:half], x[half:]))
            return sum(parts)

    def numpy_histogram():
        return np.histogram(np.load(path), bins=bins, range=(0.0, 1.0))[0]

    print(f"{args.values:_} float64 values in {path}, {bins} bins over [0, 1); "
          f"{args.workers} worker(s) x {args.threads_per_worker} thread(s); {machine()}")
    times = {name: [] for name in ("pipeline", "fast", "fast2", "numpy")}
    answers = {}
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=args.threads_per_worker,
                            dashboard=False) as session:
        client = session.client

        def pipeline():
            result = daskgpu.run("histogram-pipeline", client=client, input=path, bins=bins,
                                 range=(0.0, 1.0), chunks=args.chunks)
            if not result.verified:
                raise SystemExit(f"histogram-pipeline failed its verification: "
                                 f"{result.verification}")
            return result.timings["compute_s"], np.asarray(result.value["counts"])

        contenders = {"fast": fast_plain, "fast2": fast_two_threads, "numpy": numpy_histogram}
        for round_ in range(args.rounds + 1):  # round 0: warm-up of each
            seconds, answers["pipeline"] = pipeline()
            if round_:
                times["pipeline"].append(seconds)
            for name, run in contenders.items():
                began = time.perf_counter()
                answers[name] = np.asarray(run())
                if round_:
                    times[name].append(time.perf_counter() - began)
    if not np.array_equal(answers["pipeline"], answers["numpy"]):
        print("histogram-pipeline and numpy.histogram disagree")
        return 1
    for name in ("fast", "fast2"):
        off = int(np.abs(answers[name].astype(np.int64) - answers["numpy"]).max())
        if answers[name].sum() != answers["numpy"].sum() or off > EDGE_TOLERANCE * args.values:
            print(f"fast-histogram disagrees with numpy.histogram (a bin {off} apart)")
            return 1
    print(f"counts agree: pipeline = numpy exactly; fast-histogram within "
          f"{int(np.abs(answers['fast'].astype(np.int64) - answers['numpy']).max())} per bin")
    median = {name: statistics.median(t) for name, t in times.items()}
    labels = {"pipeline": "histogram-pipeline (compute_s)",
              "fast": "fast-histogram + np.load",
              "fast2": "fast-histogram 2 threads + np.load",
              "numpy": "numpy.histogram + np.load"}
    for name, label in labels.items():
        print(f"  {label:36} median {median[name]:.3f} s  "
              f"({', '.join(f'{t:.3f}' for t in times[name])})")
    ours = median["pipeline"]
    print(f"histogram-pipeline vs fast-histogram (with np.load): {median['fast'] / ours:.2f}x "
          f"(target >= {TARGET}x; fast-histogram 0.14 has no threads option: its plain call)")
    print(f"histogram-pipeline vs fast-histogram split over 2 threads (with np.load): "
          f"{median['fast2'] / ours:.2f}x")
    print(f"histogram-pipeline vs numpy.histogram (with np.load): {median['numpy'] / ours:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
