"""fft-pipeline on CPU workers against one ``numpy.fft.fft2``, and dask-cuda's ``local_cupy`` fft.

    python -m benchmarks.fft [--size 8192] [--dtype complex128] [--rounds 3]
        [--workers 2] [--threads-per-worker 1] [--chunks auto] [--no-local-cupy]

In alternating rounds, on one CPU LocalCluster of ``--workers`` workers:

- fft-pipeline, ``daskgpu.run``: its ``compute_s`` (the input drawn on the workers, the row
  transforms, the transpose, the column transforms, each block of the spectrum reduced;
  verified after, untimed), and its phases;
- the pipeline's baseline, one ``numpy.fft.fft2`` of the same input, timed in a fresh Python
  process (the input is drawn there first, untimed).

Both answers (the spectrum's sum of squares and its largest cell) are compared before the
ratio of the medians, baseline / pipeline, is printed (target: at least 0.7), for the whole
compute and for the transform alone (compute less the input's drawing, which the baseline does
not time).

Then, unless ``--no-local-cupy``, dask-cuda's own array benchmark
``python -m dask_cuda.benchmarks.local_cupy -t cpu --operation fft`` runs on the same workers
(its ``--scheduler-address``) at the same size, with column chunks of the pipeline's slab
width: one 1-D FFT along axis 0 of a persisted real array whose columns are chunked, no
transpose. Its median wall clock is set against the pipeline's column transforms (the same
work) and against its whole transform (two passes and the all-to-all). Where ``nvtx`` (which
``local_cupy`` imports for its profiling ranges) is not installed, a no-op stand-in module is
put on its path.
"""

from __future__ import annotations

import argparse
import statistics

import daskgpu
from benchmarks.harness import baseline_in_a_process, local_cupy, machine
from daskgpu.execution import answers

TARGET = 0.7
PHASES = ("input_s", "row_fft_s", "transpose_s", "column_fft_s", "reduce_s")

def numpy_fft2(params: dict) -> tuple[float, dict]:
    """Seconds and answer of the baseline's ``numpy.fft.fft2``, in a fresh process."""
    return baseline_in_a_process("fft-pipeline", params)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--dtype", default="complex128")
    parser.add_argument("--chunks", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-local-cupy", action="store_true")
    args = parser.parse_args()
    params = {"size": args.size, "dtype": args.dtype, "chunks": args.chunks, "seed": args.seed}
    print(f"fft-pipeline, {args.size}^2 {args.dtype}, {args.workers} CPU workers x "
          f"{args.threads_per_worker} threads; {machine()}")
    pipeline_s, transform_s, numpy_s = [], [], []
    phases: dict[str, list[float]] = {p: [] for p in PHASES}
    bandwidths = []
    with daskgpu.cluster(cpu=True, workers=args.workers,
                         threads_per_worker=args.threads_per_worker,
                         dashboard=False) as session:
        daskgpu.run("fft-pipeline", session, **{**params, "size": min(args.size, 512)})
        for round_ in range(args.rounds):
            result = daskgpu.run("fft-pipeline", session, **params)
            if not result.verified:
                raise SystemExit(f"the run failed its verification: {result.verification}")
            # The run's own slabs: the input is drawn block by block from per-block seeds.
            seconds, answer = numpy_fft2({**params, "chunks": result.data["chunks"][0]})
            disagree = answers.difference(result.value, answer)
            if disagree:
                raise SystemExit(f"the answers disagree: {disagree}")
            compute_s = result.timings["compute_s"]
            pipeline_s.append(compute_s)
            transform_s.append(compute_s - result.data["input_s"])
            numpy_s.append(seconds)
            for p in PHASES:
                phases[p].append(result.data[p])
            bandwidths.append(result.data["transpose_gb_per_s"])
            print(f"round {round_ + 1}: pipeline {compute_s:.3f} s ("
                  + ", ".join(f"{p[:-2]} {result.data[p]:.3f}" for p in PHASES)
                  + f"; transpose {result.data['transpose_bytes'] / 1e9:.2f} GB at "
                  f"{result.data['transpose_gb_per_s']:.2f} GB/s), numpy fft2 {seconds:.3f} s")
        slab = result.data["chunks"][0]
        local = [] if args.no_local_cupy else local_cupy(
            session.client.scheduler.address, "fft", "-s", str(args.size), "-c", str(slab),
            runs=args.rounds)
    med = statistics.median
    print(f"pipeline median {med(pipeline_s):.3f} s, of which "
          + ", ".join(f"{p[:-2]} {med(v):.3f} s" for p, v in phases.items())
          + f"; transpose {med(bandwidths):.2f} GB/s between blocks")
    print(f"numpy fft2 (one process) median {med(numpy_s):.3f} s")
    print(f"ratio numpy / pipeline: {med(numpy_s) / med(pipeline_s):.2f}x (target >= "
          f"{TARGET}x); transform alone (input drawing excluded): "
          f"{med(numpy_s) / med(transform_s):.2f}x")
    if local:
        columns = med(phases["column_fft_s"])
        whole = med(phases["row_fft_s"]) + med(phases["transpose_s"]) + columns
        print(f"dask-cuda local_cupy fft (-t cpu, axis 0 only, columns in {slab}-wide chunks) "
              f"median {med(local):.3f} s over {len(local)} runs")
        print(f"ratio local_cupy / pipeline's column transforms: {med(local) / columns:.2f}x; "
              f"local_cupy / pipeline's whole 2-D transform (rows, transpose, columns): "
              f"{med(local) / whole:.2f}x")


if __name__ == "__main__":
    main()
