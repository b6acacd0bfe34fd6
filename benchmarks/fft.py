"""fft-pipeline on CPU workers against ``scipy.fft.fft2(x, workers=-1)``, both from one ``.npy``.

    python -m benchmarks.fft [--size 4096 | --shape 4096,6144] [--dtype complex128]
        [--rounds 3] [--workers 2] [--threads-per-worker 1] [--layout auto]

The input, a seeded random complex (or, with ``--real``, real) array, is written once to a
``.npy`` file in a temporary folder. In alternating rounds, on one CPU LocalCluster of
``--workers`` workers:

- fft-pipeline, ``daskgpu.run(..., input=FILE)``: its ``compute_s``, which includes reading
  the file on the workers, the transforms and the reductions (the verification comes after,
  untimed), and its stages;
- the peer, in this process while the workers are idle: ``np.load(FILE)`` then
  ``scipy.fft.fft2(x, workers=-1)`` (``rfft2`` with ``--real``), every core of the machine;
  its time includes the load.

Both answers (the spectrum's sum of squares and its largest cell, from the peer's spectrum
here) are compared before the ratio of the medians, peer / pipeline, is printed (target: at
least 0.7).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time

import numpy as np

import daskgpu
from benchmarks.harness import machine
from daskgpu.execution import answers

TARGET = 0.7
PHASES = ("input_s", "row_fft_s", "transpose_s", "column_fft_s", "reduce_s")


def write_input(path: str, shape: tuple[int, int], dtype: str, real: bool) -> None:
    """A seeded random array of ``shape`` in ``path`` (.npy): real or complex ``dtype``."""
    rng = np.random.default_rng(1)
    value = {"complex128": np.float64, "complex64": np.float32}[dtype]
    if real:
        x = rng.standard_normal(shape).astype(value)
    else:
        x = np.empty(shape, dtype=dtype)
        x.real = rng.standard_normal(shape)
        x.imag = rng.standard_normal(shape)
    np.save(path, x)


def peer(path: str, real: bool) -> tuple[float, dict]:
    """Seconds of ``np.load`` + ``scipy.fft.fft2(x, workers=-1)`` (rfft2), and its answer."""
    import scipy.fft

    began = time.perf_counter()
    x = np.load(path)
    spectrum = (scipy.fft.rfft2 if real else scipy.fft.fft2)(x, workers=-1)
    seconds = time.perf_counter() - began
    power = spectrum.real.astype(np.float64) ** 2 + spectrum.imag.astype(np.float64) ** 2
    flat = int(np.argmax(power))
    return seconds, {"sum_of_squares": math.fsum(power.sum(axis=1).tolist()),
                     "max_magnitude": math.sqrt(float(power.ravel()[flat])),
                     "max_at": [flat // spectrum.shape[1], flat % spectrum.shape[1]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--shape", default=None, help="N,M (instead of --size)")
    parser.add_argument("--dtype", default="complex128")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads-per-worker", type=int, default=1)
    parser.add_argument("--layout", default="auto")
    args = parser.parse_args()
    shape = (tuple(int(s) for s in args.shape.split(",")) if args.shape
             else (args.size, args.size))
    what = f"{shape[0]} x {shape[1]} {'real ' if args.real else ''}{args.dtype}"
    print(f"fft-pipeline --layout {args.layout}, {what} from .npy, {args.workers} CPU workers x "
          f"{args.threads_per_worker} threads, against np.load + scipy.fft."
          f"{'rfft2' if args.real else 'fft2'}(workers=-1) ({os.cpu_count()} cores); "
          f"{machine()}")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "x.npy")
        write_input(path, shape, args.dtype, args.real)
        params = {"input": path, "layout": args.layout, "real": args.real, "seed": 1}
        pipeline_s, peer_s = [], []
        phases: dict[str, list[float]] = {p: [] for p in PHASES}
        with daskgpu.cluster(cpu=True, workers=args.workers,
                             threads_per_worker=args.threads_per_worker,
                             dashboard=False) as session:
            daskgpu.run("fft-pipeline", session, **params)  # warm-up: imports, plans
            peer(path, args.real)
            for round_ in range(args.rounds):
                result = daskgpu.run("fft-pipeline", session, **params)
                if not result.verified:
                    raise SystemExit(f"the run failed its verification: {result.verification}")
                seconds, answer = peer(path, args.real)
                disagree = answers.difference(result.value, answer)
                if disagree:
                    raise SystemExit(f"the answers disagree: {disagree}")
                pipeline_s.append(result.timings["compute_s"])
                peer_s.append(seconds)
                for p in PHASES:
                    phases[p].append(result.data[p])
                print(f"round {round_ + 1}: pipeline {pipeline_s[-1]:.3f} s "
                      f"({result.data['layout']}"
                      f", {result.data['threads_per_transform']} threads a transform; "
                      + ", ".join(f"{p[:-2]} {result.data[p]:.3f}" for p in PHASES)
                      + f"; transpose moved {result.data['transpose_bytes'] / 1e9:.3g} GB), "
                      f"peer {seconds:.3f} s; answers agree")
    med = statistics.median
    print(f"pipeline median {med(pipeline_s):.3f} s (compute: read, transforms, reductions), of "
          "which " + ", ".join(f"{p[:-2]} {med(v):.3f} s" for p, v in phases.items()))
    print(f"peer median {med(peer_s):.3f} s (np.load + scipy.fft, workers=-1)")
    print(f"ratio peer / pipeline: {med(peer_s) / med(pipeline_s):.2f}x (target >= {TARGET}x)")


if __name__ == "__main__":
    main()
