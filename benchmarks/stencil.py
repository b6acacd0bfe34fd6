"""stencil-pipeline: against dask-cuda's map_overlap benchmark, and k steps per exchange vs one.

    python -m benchmarks.stencil [--only peer|exchange] [--peer-size 10000]
        [--peer-chunks 4096] [--rounds 5] [--size 4000] [--steps 100] [--k 4] [--repeat 3]

1. ``peer``: one step of the 5-point stencil on an n x n float64 grid (``--peer-size``, blocks of
   ``--peer-chunks``), in alternating rounds on one ``daskgpu.cluster(cpu=True)`` of ``--workers``
   single-threaded workers:

   - stencil-pipeline, ``daskgpu.run(..., steps=1)``: its ``compute_s`` (u0 generated inside
     the exchange's tasks, the step, the l2 norm and probes; verified after, untimed);
   - the structure of dask-cuda's ``local_cupy_map_overlap`` benchmark on the same workers: the
     grid persisted first (untimed; here the same sine mode, so the answers can be compared),
     then ``client.persist(x.map_overlap(filter, depth=1, boundary="none"))`` waited on, the
     filter ``scipy.ndimage.convolve`` with the 3 x 3 five-point kernel of one explicit step
     (zero outside the grid, as the pipeline's fixed boundary).

   Both results are checked against lambda u0's l2 norm (and each other) before the ratio of the
   medians is printed. scipy is imported only here: ``pip install -e .[bench]``.
2. ``exchange``: two ``python cli.py bench stencil-pipeline --steps-per-exchange K`` (k = 1,
   then the given k) on 2 CPU workers; the figure is the ratio of their median compute times
   (target: k = 4 at least 1.3x faster than k = 1). Each also reports the NumPy baseline.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

from benchmarks.harness import machine, pipeline_bench

TARGET_EXCHANGE = 1.3
TARGET_PEER = 1.0
ALPHA = 0.2


def _five_point(block, alpha):
    """One explicit step of ``block`` as a 3 x 3 convolution (zero outside the array)."""
    from scipy import ndimage

    weights = np.array([[0.0, alpha, 0.0], [alpha, 1.0 - 4.0 * alpha, alpha],
                        [0.0, alpha, 0.0]], dtype=block.dtype)
    return ndimage.convolve(block, weights, mode="constant", cval=0.0)


def _sine_block(block_info=None, n=1):
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    rows = np.sin(math.pi * np.arange(r0 + 1, r1 + 1, dtype=np.float64) / (n + 1))
    cols = np.sin(math.pi * np.arange(c0 + 1, c1 + 1, dtype=np.float64) / (n + 1))
    return np.multiply.outer(rows, cols)


def _sum_squares(block):
    return np.array([[np.einsum("ij,ij->", block, block)]])


def peer(args) -> None:
    """stencil-pipeline against map_overlap + scipy.ndimage, one step, same workers."""
    try:
        import scipy.ndimage  # noqa: F401
    except ImportError:
        raise SystemExit("scipy is not installed: pip install -e .[bench]") from None
    import dask.array as da
    from distributed import wait

    import daskgpu
    from pipelines.stencil import shared as stencil_data

    n, block = args.peer_size, args.peer_chunks
    expected = stencil_data.decay(n, ALPHA, 1) * (n + 1) / 2
    print(f"one step, {n}x{n} float64, {block}x{block} blocks, alpha {ALPHA}; "
          f"{args.workers} worker(s) x 1 thread; {machine()}")
    times = {"pipeline": [], "map_overlap": []}
    norms = {}
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                            dashboard=False) as session:
        client = session.client
        grid = da.map_blocks(_sine_block, chunks=da.core.normalize_chunks(block, (n, n)),
                             dtype=np.float64, n=n).persist()
        wait(grid)
        for round_ in range(args.rounds + 1):  # round 0: warm-up of both
            result = daskgpu.run("stencil-pipeline", client=client, size=n, steps=1,
                                 alpha=ALPHA, chunks=str(block), steps_per_exchange=1)
            if not result.verified:
                raise SystemExit(f"stencil-pipeline failed its verification: "
                                 f"{result.verification}")
            norms["pipeline"] = result.value["l2_norm"]
            began = time.perf_counter()
            stepped = client.persist(grid.map_overlap(_five_point, depth=1, boundary="none",
                                                      alpha=ALPHA, dtype=np.float64))
            wait(stepped)
            took = time.perf_counter() - began
            norms["map_overlap"] = math.sqrt(float(
                stepped.map_blocks(_sum_squares, chunks=(1, 1), dtype=np.float64).sum()
                .compute()))
            del stepped
            if round_:
                times["pipeline"].append(result.timings["compute_s"])
                times["map_overlap"].append(took)
    tolerance = 1e-10 * expected
    for name, norm in norms.items():
        if abs(norm - expected) > tolerance:
            raise SystemExit(f"{name}: l2 norm {norm!r}, lambda (n+1)/2 = {expected!r}")
    print(f"l2 norms agree with lambda (n+1)/2 = {expected:.10g}: pipeline "
          f"{norms['pipeline']:.10g}, map_overlap {norms['map_overlap']:.10g}")
    median = {name: statistics.median(t) for name, t in times.items()}
    for name, label in (("pipeline", "stencil-pipeline (compute_s)"),
                        ("map_overlap", "map_overlap + scipy.ndimage.convolve")):
        print(f"  {label:38} median {median[name]:.3f} s  "
              f"({', '.join(f'{t:.3f}' for t in times[name])})")
    print(f"stencil-pipeline vs map_overlap: {median['map_overlap'] / median['pipeline']:.2f}x "
          f"(target >= {TARGET_PEER}x)")


def exchange(args) -> None:
    """K steps per halo exchange against one, each a ``bench`` of its own."""
    params = dict(size=args.size, steps=args.steps, chunks=args.chunks)
    medians = {}
    for k in (1, args.k):
        result = pipeline_bench("stencil-pipeline", {**params, "steps_per_exchange": k},
                                workers=args.workers, repeat=args.repeat, baseline_runs=1)
        medians[k] = result.measurements[0].median_s
        cells = args.size**2 * args.steps / medians[k]
        print(f"  steps per exchange {k}: {cells:.3g} cell updates/s")
    print(f"k={args.k} vs k=1: {medians[1] / medians[args.k]:.2f}x faster "
          f"(target >= {TARGET_EXCHANGE}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("peer", "exchange"))
    parser.add_argument("--peer-size", type=int, default=10_000)
    parser.add_argument("--peer-chunks", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.only in (None, "peer"):
        peer(args)
    if args.only in (None, "exchange"):
        exchange(args)


if __name__ == "__main__":
    main()
