"""join-pipeline's chosen strategy against the shuffles it replaces, in alternating rounds.

    python -m benchmarks.join [--rows 10000000] [--match 0.3] [--rounds 5]

On one CPU LocalCluster of ``--workers`` single-threaded workers, each round runs the pipeline
(``daskgpu.run``, its ``compute_s``; each run also verified, outside ``compute_s``) with:

- ``auto``: the strategy the pipeline chooses by size (at 10 M x 1 M rows, a broadcast of the
  right table in one partition);
- ``--shuffle p2p``: a hash join through Dask's p2p shuffle, what the pipeline did on CPU
  before it chose by size (the figure the target is set against);
- ``--shuffle tasks``: a hash join through a tasks shuffle;

and the pipeline's own baseline, the merge and the aggregate in this process with pandas (its
tables generated untimed). The contenders' order rotates from round to round; every
contender's first run is a warm-up. Their answers must agree (counts exactly, sums to rounding)
before the ratios of the medians are printed.
"""

from __future__ import annotations

import argparse
import math
import statistics

from benchmarks.harness import machine

TARGET = 2.0  # auto at least twice as fast as the p2p shuffle join
CONTENDERS = {"auto": {}, "--shuffle p2p": {"shuffle": "p2p"},
              "--shuffle tasks": {"shuffle": "tasks"}}


def _agree(a: dict, b: dict) -> str | None:
    """Why two reported values differ (None if they agree: counts exactly, sums to 1e-12)."""
    if a["joined_rows"] != b["joined_rows"]:
        return f"joined_rows {a['joined_rows']} vs {b['joined_rows']}"
    x, y = a["aggregate"], b["aggregate"]
    if x["count"] != y["count"]:
        return "per-group counts differ"
    for name in ("sum_xy", "mean_y"):
        for u, v in zip(x[name], y[name], strict=True):
            if (u is None) != (v is None) or (u is not None and not math.isclose(u, v,
                                                                                rel_tol=1e-12)):
                return f"{name} differs: {u} vs {v}"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--match", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import daskgpu

    params = {"rows": args.rows, "match": args.match, "seed": args.seed}
    spec = daskgpu.get_pipeline("join-pipeline")
    times: dict[str, list[float]] = {name: [] for name in (*CONTENDERS, "pandas baseline")}
    answers, joins = {}, {}
    with daskgpu.cluster(cpu=True, workers=args.workers, threads_per_worker=1,
                         dashboard=False) as session:
        resolved = spec.resolve(session.backend, **params)
        names = list(CONTENDERS)
        for round_ in range(args.rounds + 1):  # round 0: warm-up
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                result = daskgpu.run(spec, session, **params, **CONTENDERS[name])
                if not result.verified:
                    raise SystemExit(f"{name}: the run failed its verification: "
                                     f"{result.verification}")
                answers[name], joins[name] = result.value, result.data["join"]
                if round_:
                    times[name].append(result.timings["compute_s"])
            seconds, answers["pandas baseline"] = spec.baseline(resolved)
            if round_:
                times["pandas baseline"].append(seconds)
    for name, answer in answers.items():
        why = _agree(answers["auto"], answer)
        if why:
            raise SystemExit(f"{name} answers differently from auto: {why}")
    print(f"join-pipeline, {args.rows:_} x {args.rows // 10:_} rows, match {args.match}, "
          f"{args.workers} single-thread workers; {machine()}")
    print(f"medians of {args.rounds} rounds after a warm-up, contenders rotating; answers agree")
    auto = statistics.median(times["auto"])
    for name, runs in times.items():
        median = statistics.median(runs)
        how = f" ({joins[name]})" if name in joins else ""
        print(f"  {name:16s} {median:7.3f} s  (min {min(runs):.3f}, max {max(runs):.3f})  "
              f"{median / auto:5.2f}x auto's time{how}")
    ratio = statistics.median(times["--shuffle p2p"]) / auto
    verdict = "met" if ratio >= TARGET else "NOT met"
    print(f"auto is {ratio:.2f}x as fast as the p2p shuffle join (target >= {TARGET:g}x: "
          f"{verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
