"""``daskgpu.ml.PCA.fit`` against scikit-learn's ``PCA(svd_solver="covariance_eigh").fit``.

    python -m benchmarks.ml_pca [--samples 1000000] [--features 256] [--components 10]
        [--solver covariance_eigh] [--rounds 3] [--workers 2] [--small]

One NumPy array in this process (``samples x features`` float64 rows ``z diag(sigma) V^T + 1``,
pca-pipeline's own spectrum and basis, :mod:`pipelines.pca.shared`, made once, untimed) is fitted
by both, in alternating rounds, each whole call timed as a user's script would see it:

- ``daskgpu.ml.PCA(components, svd_solver=--solver).fit(X, session=...)`` on one CPU cluster of
  ``--workers`` single-threaded workers: the array sent to the workers in the run's blocks, the
  pipeline's pass, and its verification at the default depth (``fast``); the run's own
  ``verify_s`` gives the verification's share of the fit;
- the same ``fit`` of the same rows held by the workers already: a Dask array in the run's
  blocks, persisted once before the rounds (untimed), as a user's data loaded on the cluster
  are: the fit without the array's journey from this process;
- scikit-learn's ``PCA(components, svd_solver="covariance_eigh").fit(X)`` here, its BLAS on
  every core (the same cores as the workers': ``os.cpu_count()``).

Both are warmed up first on the array's first rows (untimed). Before any ratio is printed,
every round's answers are compared: explained variances, their ratios, singular values, the
means and the components (scikit-learn's signs, so compared as they are), each within the
relative tolerance of :func:`daskgpu.execution.answers.tolerance` for float64 and the rows (a
component, a row of unit norm, by its norm). The ratio is scikit-learn's median seconds over
ours (above 1: ours is faster). ``--small`` is the twin a test runs in seconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field, replace

import numpy as np

import daskgpu
from benchmarks.harness import machine
from daskgpu.execution import answers

# What is compared before a ratio is printed: the fitted attributes, scikit-learn's names.
COMPARED = ("explained_variance_", "explained_variance_ratio_", "singular_values_", "mean_",
            "components_")
WARM_UP_ROWS = 4096
MAKE_ROWS = 65_536
OFFSET = 1.0  # the rows' mean: both fits must centre


class Disagreement(RuntimeError):
    """The two fits' answers differ: no ratio is printed."""


@dataclass(frozen=True)
class Config:
    """One benchmark's sizes and contenders' settings."""

    samples: int = 1_000_000
    features: int = 256
    components: int = 10
    solver: str = "covariance_eigh"
    rounds: int = 3
    workers: int = 2
    seed: int = 1

    @classmethod
    def small(cls) -> Config:
        """The twin a test runs in seconds: the same steps on 20,000 x 32 rows, one round."""
        return cls(samples=20_000, features=32, components=5, rounds=1)


@dataclass
class Measured:
    """Seconds of each round's fits, the verification's, and what was compared."""

    ours_s: list[float] = field(default_factory=list)
    held_s: list[float] = field(default_factory=list)
    theirs_s: list[float] = field(default_factory=list)
    verify_s: list[float] = field(default_factory=list)
    held_verify_s: list[float] = field(default_factory=list)
    compared: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """scikit-learn's median seconds over ours (the NumPy array sent in the fit)."""
        return statistics.median(self.theirs_s) / statistics.median(self.ours_s)

    @property
    def held_ratio(self) -> float:
        """scikit-learn's median seconds over ours on the rows the workers hold already."""
        return statistics.median(self.theirs_s) / statistics.median(self.held_s)

    @property
    def verify_share(self) -> float:
        """The median share of our fit (the NumPy array sent) that its verification took."""
        return statistics.median(v / s for v, s in zip(self.verify_s, self.ours_s, strict=True))

    @property
    def held_verify_share(self) -> float:
        """The median share of our fit of the rows held that its verification took."""
        return statistics.median(v / s for v, s in zip(self.held_verify_s, self.held_s,
                                                       strict=True))


def rows(config: Config) -> np.ndarray:
    """The rows ``z diag(sigma) V^T + OFFSET`` (pca-pipeline's spectrum and basis), float64."""
    from pipelines.pca import shared

    frame = shared.spectrum(config.features)[:, None] * shared.basis(config.seed,
                                                                      config.features).T
    rng = np.random.default_rng(np.random.SeedSequence((config.seed, 8)))
    x = np.empty((config.samples, config.features))
    for first in range(0, config.samples, MAKE_ROWS):
        count = min(MAKE_ROWS, config.samples - first)
        np.matmul(rng.standard_normal((count, config.features)), frame,
                  out=x[first:first + count])
    x += OFFSET
    return x


def sklearn_fit(x: np.ndarray, config: Config) -> tuple[float, object]:
    """scikit-learn's covariance PCA of ``x``: seconds of its ``fit``, and the fitted model."""
    from sklearn.decomposition import PCA

    model = PCA(config.components, svd_solver="covariance_eigh")
    began = time.perf_counter()
    model.fit(x)
    return time.perf_counter() - began, model


def held(x: np.ndarray, rows_per_block: int, session):
    """``x`` as a Dask array of ``rows_per_block`` rows a block, each block on a worker.

    The blocks are scattered straight to the workers (not through the scheduler in a graph).
    """
    import dask
    import dask.array as da

    blocks = [x[i:i + rows_per_block] for i in range(0, x.shape[0], rows_per_block)]
    futures = session.client.scatter(blocks)
    return da.concatenate([da.from_delayed(dask.delayed(future), block.shape, dtype=x.dtype)
                           for future, block in zip(futures, blocks, strict=True)])


def ours_fit(x, config: Config, session) -> tuple[float, object]:
    """``daskgpu.ml.PCA`` of ``x`` on ``session``: seconds of its ``fit``, and the model."""
    from daskgpu.ml import PCA

    model = PCA(config.components, svd_solver=config.solver)
    began = time.perf_counter()
    model.fit(x, session=session)
    return time.perf_counter() - began, model


def disagreement(ours, theirs, samples: int) -> str | None:
    """How two fits differ, attribute by attribute (:data:`COMPARED`); None where they agree."""
    rtol = answers.tolerance("float64", samples)
    for name in COMPARED:
        a, b = np.asarray(getattr(ours, name)), np.asarray(getattr(theirs, name))
        if a.shape != b.shape:
            return f"{name}: shape {a.shape} against {b.shape}"
        if a.ndim == 2:  # components: each by its norm
            off = np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)
            if not off.max() <= rtol:
                i = int(np.argmax(off))
                return f"{name}[{i}]: off by {off[i]:.3g} of its norm (tolerance {rtol:.3g})"
            continue
        wrong = answers.difference(a, b, rtol=rtol, where=name)
        if wrong:
            return f"{wrong} (relative tolerance {rtol:.3g})"
    return None


def measure(config: Config, session) -> Measured:
    """Alternating rounds of both fits on ``session``, each round's answers compared.

    Raises
    ------
    Disagreement
        A round's fits differ (nothing more is timed).
    """
    x = rows(config)
    warm = replace(config, samples=min(WARM_UP_ROWS, config.samples))
    _, first = ours_fit(x[:warm.samples], warm, session)
    ours_fit(held(x[:warm.samples], first.result_.data["chunks"][0], session), warm, session)
    sklearn_fit(x[:warm.samples], warm)
    measured, lazy = Measured(), None
    for round_ in range(config.rounds):
        seconds, ours = ours_fit(x, config, session)
        if lazy is None:  # the run's own blocks, on the workers before the first timed fit
            lazy = held(x, ours.result_.data["chunks"][0], session)
        held_seconds, ours_held = ours_fit(lazy, config, session)
        their_seconds, theirs = sklearn_fit(x, config)
        for fit, what in ((ours, "the NumPy array"), (ours_held, "the rows held")):
            wrong = disagreement(fit, theirs, config.samples)
            if wrong:
                raise Disagreement(f"round {round_ + 1}: daskgpu.ml.PCA (of {what}) and "
                                   f"scikit-learn disagree: {wrong}")
        measured.ours_s.append(seconds)
        measured.held_s.append(held_seconds)
        measured.theirs_s.append(their_seconds)
        measured.verify_s.append(ours.result_.timings["verify_s"])
        measured.held_verify_s.append(ours_held.result_.timings["verify_s"])
        measured.compared = COMPARED
        print(f"round {round_ + 1}: daskgpu.ml.PCA.fit {seconds:.3f} s ({_phases(ours)}), of "
              f"the rows held {held_seconds:.3f} s ({_phases(ours_held)}); scikit-learn "
              f"{their_seconds:.3f} s; answers agree ({', '.join(COMPARED)})", flush=True)
    return measured


def _phases(model) -> str:
    timings = model.result_.timings
    return (f"build {timings['build_s']:.3f} s, compute {timings['compute_s']:.3f} s, verify "
            f"{timings['verify_s']:.3f} s; {model.method_}, {model.result_.data['blocks']} blocks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = Config()
    parser.add_argument("--samples", type=int, default=defaults.samples)
    parser.add_argument("--features", type=int, default=defaults.features)
    parser.add_argument("--components", type=int, default=defaults.components)
    parser.add_argument("--solver", default=defaults.solver,
                        choices=("auto", "covariance_eigh", "full", "randomized"))
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--small", action="store_true", help="The test's twin: 20,000 x 32.")
    args = parser.parse_args()
    config = Config.small() if args.small else Config(
        args.samples, args.features, args.components, args.solver, args.rounds, args.workers)
    print(f"daskgpu.ml.PCA(svd_solver={config.solver!r}) against scikit-learn covariance_eigh, "
          f"{config.samples} x {config.features} float64 in memory, {config.components} "
          f"components, {config.workers} single-threaded CPU workers; {machine()}", flush=True)
    with daskgpu.cluster(cpu=True, workers=config.workers, threads_per_worker=1,
                         dashboard=False) as session:
        try:
            measured = measure(config, session)
        except Disagreement as exc:
            raise SystemExit(str(exc)) from None
    ours_m, theirs_m = statistics.median(measured.ours_s), statistics.median(measured.theirs_s)
    print(f"daskgpu.ml.PCA.fit median {ours_m:.3f} s (of the rows held "
          f"{statistics.median(measured.held_s):.3f} s), scikit-learn median {theirs_m:.3f} s")
    print(f"ratio scikit-learn / daskgpu.ml.PCA.fit: {measured.ratio:.2f}x (the NumPy array "
          f"sent in the fit), {measured.held_ratio:.2f}x (the rows held by the workers)")
    print(f"verification's share of the fit (verify_s / fit): {measured.verify_share:.1%} (the "
          f"NumPy array sent), {measured.held_verify_share:.1%} (the rows held)")


if __name__ == "__main__":
    main()
