"""matmul-pipeline on CPU workers against one NumPy ``A @ B`` with every core.

    python -m benchmarks.matmul [--size 8000] [--dtype float64] [--rounds 3]
        [--workers 2] [--chunks auto]

In alternating rounds, on one CPU LocalCluster of ``--workers`` single-threaded workers (their
BLAS limited to one thread each, distributed's default):

- matmul-pipeline, ``daskgpu.run``: its ``compute_s`` (A and B drawn on the workers, the block
  products, each block of C reduced to its summaries; verified after, untimed);
- the pipeline's baseline, one ``A @ B`` on the same A and B, timed in a fresh Python process
  whose BLAS may use every core (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS`` and
  ``MKL_NUM_THREADS`` set to the core count; A and B are made there first, untimed).

Both answers (C's Frobenius norm and sum) are compared before the ratio of the medians,
baseline / pipeline, is printed (target: at least 0.8). Also shown: the pipeline's GFLOP/s
(2 n k m / compute_s) and their share of the single-worker peak the run measured at its start
times the workers.
"""

from __future__ import annotations

import argparse
import os
import statistics

import daskgpu
from benchmarks.harness import baseline_in_a_process, local_cupy, machine
from daskgpu.execution import answers

TARGET = 0.8

def numpy_all_threads(params: dict) -> tuple[float, dict]:
    """Seconds and answer of the baseline's ``A @ B``, in a process with every core's BLAS."""
    return baseline_in_a_process("matmul-pipeline", params, all_blas_threads=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--local-cupy", action="store_true",
                        help="Also run dask-cuda's local_cupy -t cpu --operation dot.")
    args = parser.parse_args()
    params = {"size": args.size, "dtype": args.dtype, "chunks": args.chunks, "seed": args.seed}
    print(f"matmul-pipeline, n = {args.size} {args.dtype}, {args.workers} CPU workers; "
          f"{machine()}")
    pipeline_s, numpy_s, rates, fractions = [], [], [], []
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                         dashboard=False) as session:
        daskgpu.run("matmul-pipeline", session, **{**params, "size": min(args.size, 500)})
        for round_ in range(args.rounds):
            result = daskgpu.run("matmul-pipeline", session, **params)
            if not result.verified:
                raise SystemExit(f"the run failed its verification: {result.verification}")
            # The run's own blocks: random data is drawn block by block from per-block seeds.
            blocks = ",".join(map(str, result.data["chunks"]))
            seconds, answer = numpy_all_threads({**params, "chunks": blocks})
            disagree = answers.difference(result.value, answer)
            if disagree:
                raise SystemExit(f"the answers disagree: {disagree}")
            compute_s = result.timings["compute_s"]
            rate = result.data["flop"] / compute_s / 1e9
            peak = result.data["peak_gflop_per_s"]
            pipeline_s.append(compute_s)
            numpy_s.append(seconds)
            rates.append(rate)
            fractions.append(rate / (peak * args.workers) if peak else float("nan"))
            print(f"round {round_ + 1}: pipeline {compute_s:.3f} s ({rate:.1f} GFLOP/s, "
                  f"one worker's peak {peak} GFLOP/s, blocks {result.data['chunks']}), "
                  f"numpy @ {seconds:.3f} s")
        # x.dot(y) of two square uniform arrays, persisted first, in the run's blocks.
        dot = local_cupy(session.client.scheduler.address, "dot", "-s", str(args.size), "-c",
                         str(result.data["chunks"][0]), runs=args.rounds) \
            if args.local_cupy else []
    ratio = statistics.median(numpy_s) / statistics.median(pipeline_s)
    print(f"pipeline median {statistics.median(pipeline_s):.3f} s, "
          f"{statistics.median(rates):.1f} GFLOP/s, "
          f"{statistics.median(fractions):.0%} of {args.workers} x one worker's peak")
    print(f"numpy @ ({os.cpu_count()} BLAS threads) median {statistics.median(numpy_s):.3f} s")
    print(f"ratio numpy / pipeline: {ratio:.2f}x (target >= {TARGET}x)")
    if dot:
        print(f"dask-cuda local_cupy -t cpu --operation dot median {statistics.median(dot):.3f} s;"
              f" ratio local_cupy / pipeline: "
              f"{statistics.median(dot) / statistics.median(pipeline_s):.2f}x (target >= 1x)")


if __name__ == "__main__":
    main()
