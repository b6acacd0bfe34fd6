"""pca-pipeline on CPU workers against ``dask.array.linalg.svd`` and one ``numpy.linalg.svd``.

    python -m benchmarks.pca [--samples 1000000] [--features 256]
        [--dtype float64] [--components 10] [--method exact] [--rounds 3] [--workers 2]
        [--local-cupy]

In alternating rounds, on one CPU LocalCluster of ``--workers`` single-threaded workers:

- pca-pipeline, ``daskgpu.run``: its ``compute_s`` (the rows drawn on the workers, each block
  reduced to its R, the tree, the small SVD; verified after, untimed);
- ``dask.array.linalg.svd`` of the same lazily generated, same chunked array, centred with
  ``x - x.mean(axis=0)``: the seconds to compute its singular values and right singular
  vectors on the same cluster (the data drawn inside the timed graph, as in the pipeline);
- the pipeline's baseline, ``numpy.linalg.svd`` of the whole centred array, timed in a fresh
  process whose BLAS uses every core (the array made there first, untimed).

The explained variances of all three are compared before the ratios of the medians are printed
(targets: dask / pipeline at least 1.5, numpy / pipeline at least 1). ``--local-cupy`` also
runs dask-cuda's ``local_cupy`` benchmark, ``-t cpu --operation svd``, at the same size and
chunks on the same workers (through ``--scheduler-address``) and prints the ratio of its median
wall clock to the pipeline's; it times ``np.linalg.svd`` of a persisted, uncentred uniform array
(U included, the data's generation not). Its module imports ``nvtx`` for profiling ranges only:
where that package is missing, a stub with no-op ranges is put on its path.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import daskgpu
from benchmarks.harness import baseline_in_a_process, local_cupy, machine
from daskgpu.execution import answers

TARGET_DASK = 1.5
TARGET_NUMPY = 1.0

def numpy_all_threads(params: dict) -> tuple[float, list[float]]:
    """Seconds and leading explained variances of the baseline, with every core's BLAS."""
    seconds, answer = baseline_in_a_process("pca-pipeline", params, all_blas_threads=True)
    return seconds, answer["explained_variance"]


def dask_svd(session, params: dict, shown: int) -> tuple[float, list[float]]:
    """Seconds of ``dask.array.linalg.svd`` of the pipeline's centred array, and its variances."""
    import dask
    import dask.array as da

    from pipelines.pca import pipeline as pca_pipeline

    spec = daskgpu.get_pipeline("pca-pipeline")
    resolved = spec.resolve(session.backend, **params)
    x, _ = pca_pipeline.array(resolved)
    _, s, v = da.linalg.svd(x - x.mean(axis=0))
    began = time.perf_counter()
    s, _ = dask.compute(s, v, scheduler=session.client)
    seconds = time.perf_counter() - began
    return seconds, (s[:shown] ** 2 / (resolved["samples"] - 1)).tolist()


def local_cupy_svd(session, samples: int, features: int, rows: int, rounds: int) -> float:
    """Median wall clock of dask-cuda's ``local_cupy -t cpu --operation svd`` on the workers."""
    return statistics.median(local_cupy(
        session.client.scheduler.address, "svd", "-s", str(samples), "-2", str(features),
        "-c", str(rows), runs=rounds))


def _agree(what: str, got, expected) -> None:
    disagree = answers.difference(list(got), list(expected), rtol=1e-6)
    if disagree:
        raise SystemExit(f"{what}: the explained variances disagree: {disagree}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--components", type=int, default=10)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--method", default="exact")
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--local-cupy", action="store_true")
    parser.add_argument("--no-numpy", action="store_true", help="Skip numpy.linalg.svd.")
    args = parser.parse_args()
    params = {"samples": args.samples, "features": args.features, "dtype": args.dtype,
              "components": args.components, "method": args.method, "chunks": args.chunks,
              "seed": args.seed}
    print(f"pca-pipeline, {args.samples} x {args.features} {args.dtype}, {args.method}, "
          f"{args.workers} CPU workers; {machine()}")
    pipeline_s, dask_s, numpy_s = [], [], []
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                         dashboard=False) as session:
        daskgpu.run("pca-pipeline", session, **{**params, "samples": 2000})  # warm the workers
        for round_ in range(args.rounds):
            result = daskgpu.run("pca-pipeline", session, **params)
            if not result.verified:
                raise SystemExit(f"the run failed its verification: {result.verification}")
            variance = result.value["explained_variance"]
            rows = result.data["chunks"][0]
            same = {**params, "chunks": str(rows)}  # the run's blocks: data drawn per block
            seconds, dask_variance = dask_svd(session, same, len(variance))
            _agree("dask.array.linalg.svd", variance, dask_variance)
            line = (f"round {round_ + 1}: pipeline {result.timings['compute_s']:.3f} s "
                    f"({result.data['blocks']} blocks of {rows} rows), dask svd {seconds:.3f} s")
            pipeline_s.append(result.timings["compute_s"])
            dask_s.append(seconds)
            if not args.no_numpy:
                seconds, numpy_variance = numpy_all_threads(same)
                _agree("numpy.linalg.svd", variance, numpy_variance)
                numpy_s.append(seconds)
                line += f", numpy svd {seconds:.3f} s"
            print(line, flush=True)
        cupy_s = (local_cupy_svd(session, args.samples, args.features, rows, args.rounds)
                  if args.local_cupy else None)
    median = statistics.median(pipeline_s)
    print(f"pipeline median {median:.3f} s; dask.array.linalg.svd median "
          f"{statistics.median(dask_s):.3f} s")
    print(f"ratio dask svd / pipeline: {statistics.median(dask_s) / median:.2f}x "
          f"(target >= {TARGET_DASK}x)")
    if numpy_s:
        print(f"ratio numpy svd ({os.cpu_count()} BLAS threads) / pipeline: "
              f"{statistics.median(numpy_s) / median:.2f}x (target >= {TARGET_NUMPY}x)")
    if cupy_s is not None:
        print(f"dask-cuda local_cupy -t cpu --operation svd median {cupy_s:.3f} s; ratio "
              f"local_cupy / pipeline: {cupy_s / median:.2f}x")


if __name__ == "__main__":
    main()
