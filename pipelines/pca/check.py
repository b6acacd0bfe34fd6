"""pca-pipeline's check, declared on :mod:`daskgpu.verification`.

With ``C = X_c^T X_c`` the centred Gram matrix of the ``n x d`` rows and ``lambda_i = s_i**2 =
(n - 1) explained_variance_i``, both depths establish: the method taken is one ``--method``
allows; orthonormal components, ordered and consistent variances; the total variance
``trace(C) / (n - 1)``; every ``|C v_i - lambda_i v_i| <= tau`` and the ``lambda_i`` ``C``'s
largest eigenvalues within ``tau``; sampling error of the known ``sigma_i**2`` (generated
data); the covariance method kept only where it vouches for it (auto); the projection. ``C`` is
summed apart at ``full`` (:mod:`.check_full`); at ``fast`` the run's own Gram matrix stands for
it within ``tau / 2`` once it is ``C`` on seeded probes, or a thin pass gives ``C V^T``
(:mod:`.check_fast`). The data are drawn or read again by :mod:`.check_replay`.

``tau``: :func:`~daskgpu.verification.tolerance` of ``2 trace(C)`` (rows off by ``dX`` move
``C`` by ``2 |dX| |X|``), the run's ``d`` terms in the data's dtype (Householder QR's backward
error, rows formed in that dtype), the check's ``n`` in float64. ``--method randomized`` may
also miss by its promised :data:`~pipelines.pca.shared.RANDOMIZED_ACCURACY`. Sampling error
(Lawley, 1956, to first order): standard deviation ``sqrt(2 / (n - 1)) sigma_i**2``, bias at
most ``(sigma_i**2 / n) sum_j sigma_j**2 / |sigma_i**2 - sigma_j**2|``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import dask
import numpy as np

from daskgpu.toolkit.backends import to_host
from daskgpu.verification import Check, Unreadable, bounds, differences
from daskgpu.verification.bounds import rounding, tolerance
from pipelines.pca import shared
from pipelines.pca.check_mutations import MUTATIONS
from pipelines.pca.shared import PcaContext

KEYS = ("components", "singular_values", "explained_variance", "explained_variance_ratio",
        "total_variance", "samples")


@dataclass
class Gram:
    """What a depth knows of ``C``: itself (``scatter``), or ``C Q`` and ``C V^T``."""

    trace: float
    mean: np.ndarray
    scatter: np.ndarray | None = None
    cq: np.ndarray | None = None
    cv: np.ndarray | None = None
    probes: np.ndarray | None = None
    cells: dict | None = None  # the certificates stacked
    reach: float = 0.0  # how far the run's own Gram matrix may be from C


@dataclass
class Reading:
    """What the check reads of a run's ``raw`` result; ``gram``: what a first step recomputed."""

    raw: dict
    result: dict
    taken: str
    samples: int
    gram: Gram | None = None
    own: np.ndarray | None = None
    keep: bool = False  # whether the run kept its projection on the workers (from Python)

    def array(self, key: str) -> np.ndarray:
        """``result[key]`` as float64."""
        return np.asarray(self.result[key], dtype=np.float64)

    @property
    def lambdas(self) -> np.ndarray:
        """``s_i**2``: the explained variances times ``samples - 1``."""
        return self.array("explained_variance") * (self.samples - 1)

    @property
    def own_name(self) -> str:
        """The run's own Gram matrix: its ``gram``, or ``R^T R`` of its R factor."""
        return "Gram matrix" if self.taken == "covariance" else "R^T R"


def read(workload, raw) -> Reading:
    """The result, its certificates and projection sums, or why it cannot be checked."""
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or any(key not in result for key in KEYS):
        raise Unreadable(f"result {type(raw).__name__} lacks {', '.join(KEYS)}")
    method = workload.context.method
    taken = result.get("method", "covariance" if method == "auto" else method)
    return Reading(raw, result, str(taken), workload.context.samples, keep=workload.keep)


def tau(ctx: PcaContext, trace: float) -> float:
    """The bound on ``|C v - lambda v|``, the eigenvalues and the trace (see the module)."""
    return tolerance(2 * trace, ctx.features, ctx.dtype, check_terms=ctx.samples)


def slack(ctx: PcaContext, r: Reading) -> float:
    """``tau``, or for ``--method randomized`` its promised accuracy where that is larger."""
    approximate = ctx.method == "randomized" and r.lambdas.size
    return max(tau(ctx, r.gram.trace),
               shared.RANDOMIZED_ACCURACY * float(r.lambdas[0]) if approximate else 0.0)


def own_gram(ctx: PcaContext, r: Reading, verdict) -> np.ndarray | None:
    """The run's own Gram matrix (``R^T R``, or its ``gram``); None where it is malformed."""
    if r.own is None:
        key = "gram" if r.taken == "covariance" else "r"
        m = np.asarray(r.result.get(key, np.empty((0, 0))), dtype=np.float64)
        d = ctx.features
        good = m.ndim == 2 and m.shape[1] == d and (key == "r" or m.shape[0] == d)
        if verdict.require(good and np.isfinite(m).all(), lambda: (
                f"the run's {key}: shape {m.shape}, finite {bool(np.isfinite(m).all())}; d = {d}")):
            r.own = m if key == "gram" else m.T @ m
    return r.own


def _standing(ctx: PcaContext, r: Reading, verdict) -> tuple:
    """The matrix the components are held to, its name, the bound: ``C`` or the run's own."""
    if r.gram.scatter is not None:
        return r.gram.scatter, "the blockwise Gram matrix", slack(ctx, r)
    return (own_gram(ctx, r, verdict), f"the run's {r.own_name} (the data's Gram matrix on the "
                                       "probes)", slack(ctx, r) / 2)


def form(ctx: PcaContext, r: Reading, verdict) -> None:
    """The method allowed; components orthonormal, variances ordered and consistent."""
    k, n, d = ctx.components, ctx.samples, ctx.features
    v, variance = r.array("components"), r.array("explained_variance")
    allowed = ("covariance", "exact") if ctx.method == "auto" else (ctx.method,)
    shaped = v.shape == (k, d) and variance.shape == (k,) and int(r.result["samples"]) == n
    if not (verdict.require(r.taken in allowed, f"the result says it took the {r.taken} method; "
                                                f"--method {ctx.method} takes "
                                                f"{' or '.join(allowed)}")
            and verdict.require(shaped, lambda: (
                f"components of shape {v.shape}, {variance.shape} variances over "
                f"{r.result['samples']} samples; {(k, d)}, ({k},) over {n} expected"))
            and verdict.require(np.isfinite(v).all() and np.isfinite(variance).all(),
                                "components or explained variances are not finite")):
        return
    off = float(np.abs(v @ v.T - np.eye(k)).max())  # an SVD: d reflections of d terms each
    ordered = (variance >= 0).all() and (np.diff(variance) <= 0).all()
    if not (verdict.require(off <= tolerance(1.0, d * d),
                            f"components not orthonormal: |V V^T - I| reaches {off:.3g}")
            and verdict.require(ordered, f"explained variances not in descending order: "
                                         f"{variance[:6]}")):
        return
    expected, few = r.array("singular_values") ** 2 / (n - 1), tolerance(1.0, 4)
    ratio = r.array("explained_variance_ratio") * float(r.result["total_variance"])
    if verdict.note(differences(variance, expected, what="explained variance",
                                expected_as="s^2 / (samples - 1) =", tolerance=few * expected)
                    ) and verdict.note(differences(
            ratio, variance, what="explained variance", reported_as="{} as ratio times total",
            expected_as="reported", tolerance=few * variance)):
        verdict.establish(f"{k} components orthonormal, their variances ordered and consistent")


def total_variance(ctx: PcaContext, r: Reading, verdict) -> None:
    """The total variance is ``trace(C) / (n - 1)``."""
    n, trace, got = ctx.samples, r.gram.trace, float(r.result["total_variance"])
    bound = tau(ctx, trace) / (n - 1)
    if verdict.require(abs(got - trace / (n - 1)) <= bound, (
            f"total variance {got:.12g}, trace of the Gram matrix gives {trace / (n - 1):.12g} "
            f"(bound {bound:.3g})")):
        verdict.establish("the total variance its trace / (samples - 1)")


def eigenvectors(ctx: PcaContext, r: Reading, verdict) -> None:
    """Every component an eigenvector: of ``C``, or (fast) of the run's own Gram matrix."""
    v, lam = r.array("components"), r.lambdas
    if r.gram.cv is not None:  # the thin pass: C V^T
        product, name, what = r.gram.cv.T, "X^T (X v)", "the Gram matrix X^T X"
        bound = slack(ctx, r)
    else:
        m, what, bound = _standing(ctx, r, verdict)
        if m is None:
            return
        product, name = v @ m, "C v" if m is r.gram.scatter else f"{r.own_name} v"
    residual = np.linalg.norm(product - lam[:, None] * v, axis=1)
    if verdict.fail_all(f"component {i} is no eigenvector of {what}: |{name} - s^2 v| = "
                        f"{residual[i]:.3g} > {bound:.3g} (s^2 = {lam[i]:.12g})"
                        for i in np.flatnonzero(~(residual <= bound))):
        verdict.establish(f"every component an eigenvector of {what} within {bound:.3g}")


def eigenvalues(ctx: PcaContext, r: Reading, verdict) -> None:
    """The variances are the largest eigenvalues: of ``C``, or (fast) of the run's own."""
    m, what, bound = _standing(ctx, r, verdict)
    if m is None:
        return
    lam = r.lambdas
    top = np.linalg.eigvalsh(m)[::-1][:lam.size]
    if verdict.fail_all(f"component {i}: s^2 = {lam[i]:.12g}, eigenvalue {i} of {what} is "
                        f"{top[i]:.12g} (bound {bound:.3g}): not its largest eigenvalues"
                        for i in np.flatnonzero(~(np.abs(lam - top) <= bound))[:1]):
        verdict.establish(f"their variances its {lam.size} largest eigenvalues")


def spectrum(ctx: PcaContext, r: Reading, verdict) -> None:
    """Generated data: each variance within sampling error of the known ``sigma_i**2``."""
    n, d, variance = ctx.samples, ctx.features, r.array("explained_variance")
    sigma2 = shared.spectrum(d) ** 2
    each = bounds.share(bounds.FALSE_ALARM, variance.size)
    deviations = bounds.sigmas(each) * math.sqrt(2 / (n - 1))
    for i, got in enumerate(variance):
        others = np.delete(sigma2, i)  # distinct: sigma_j = DECAY**j
        bias = sigma2[i] / n * float(np.sum(others / np.abs(sigma2[i] - others)))
        # the rows are formed in the data's dtype, d + 2 roundings of |x| each
        formed = 2 * rounding(d + 2, ctx.dtype) * math.sqrt(sigma2[i] * sigma2.sum())
        bound = deviations * sigma2[i] + 2 * bias + slack(ctx, r) / (n - 1) + formed
        if not verdict.require(abs(got - sigma2[i]) <= bound, (
                f"explained variance {i}: {got:.6g}, the known spectrum gives sigma^2 = "
                f"{sigma2[i]:.6g} (sampling bound {bound:.3g})")):
            return
    verdict.establish("explained variances within sampling error of sigma**2")


def choice(ctx: PcaContext, r: Reading, verdict) -> None:
    """``--method auto`` kept the covariance method only where it vouches for every variance."""
    # the run's rule on the verified variances and trace, room for its own rounding of it
    short = shared.covariance_shortfall(r.lambdas, ctx.samples, ctx.features, r.gram.trace,
                                        ctx.dtype, room=2.0) if r.taken == "covariance" else None
    if short is not None:
        i, ours, theirs = short
        verdict.fail(f"the covariance method was kept where it cannot vouch for variance {i}: "
                     f"its relative error bound {ours:.3g} exceeds {shared.ACCURACY:.0e} and "
                     f"the exact method's {theirs:.3g}; auto takes the exact method there")


def projection(ctx: PcaContext, r: Reading, verdict) -> None:
    """The projection ``T = X_c V^T``: its columns sum to 0, their squares to s^2.

    Written (``--project``: the sums the run reports), and kept on the workers (a run from
    Python: summed here, from its blocks). A column of ``T`` (in the data's dtype) is off by
    ``c S`` at most, ``c = rounding(d + 2)``, ``S = |X_c|_F + sqrt(n) |mean|``: its squares by
    ``2 |T_i| c S``, its sum by ``sqrt(n) c S``.
    """
    n, lam, gram, kept = ctx.samples, r.lambdas, r.gram, r.raw.get("projection")
    found = [("projection", *(r.raw.get(f"projected_{key}") for key in ("sums", "squares")))
             ] if ctx.project is not None else []
    said = getattr(kept, "dtype", type(kept).__name__), getattr(kept, "shape", None)
    if r.keep and verdict.require(said == (ctx.dtype, (n, lam.size)), (
            f"the kept projection: {said[0]} {said[1]}; {ctx.dtype} {(n, lam.size)} expected")):
        wide = kept.map_blocks(to_host, dtype=kept.dtype).astype(np.float64)  # on the workers
        found.append(("kept projection", *dask.compute(wide.sum(axis=0),
                                                       (wide * wide).sum(axis=0))))
    spread = math.sqrt(gram.trace) + math.sqrt(n) * float(np.linalg.norm(gram.mean))
    column = rounding(ctx.features + 2, ctx.dtype) * spread
    centred = math.sqrt(n) * (column + rounding(n) * spread)
    for name, sums, squares in found:
        sums, squares = np.asarray(sums, np.float64), np.asarray(squares, np.float64)
        worst = int(np.argmax(np.abs(sums))) if sums.size else 0
        if not (verdict.require(sums.shape == squares.shape == lam.shape, (
                f"{name}: column sums {sums.shape}, squares {squares.shape}; {lam.shape} "
                "expected")) and verdict.note(differences(
                squares, lam, what=f"{name} on component", reported_as="sum of squares {}",
                expected_as="s^2", unit="components",
                tolerance=slack(ctx, r) + 2 * np.sqrt(lam) * column + column**2)) and (
                verdict.require(abs(sums[worst]) <= centred, (
                    f"{name} on component {worst}: its column sums to {sums[worst]:.6g}, not "
                    f"0 (bound {centred:.3g}): not centred")))):
            return
        verdict.establish(f"the {name}'s columns sum to 0 and their squares to s^2")



def _steps(ctx: PcaContext, *middle) -> tuple:
    known = (spectrum,) if ctx.random else ()
    auto = (choice,) if ctx.method == "auto" else ()
    return (*middle, *known, *auto, projection)


def _fast(ctx: PcaContext) -> tuple:
    from pipelines.pca import check_fast as fast

    if ctx.method == "randomized":
        return _steps(ctx, form, fast.thin_pass, total_variance, eigenvectors, fast.deflated)
    return _steps(ctx, form, fast.certified, total_variance, fast.freivalds, eigenvectors,
                  eigenvalues, fast.cells_again)


def _full(ctx: PcaContext) -> tuple:
    from pipelines.pca import check_full as full

    own = (full.own_gram_agrees,) if ctx.method != "randomized" else ()
    return _steps(ctx, form, full.recomputed, total_variance, eigenvectors, eigenvalues, *own)


CHECK = Check(fast=_fast, full=_full, read=read, mutations=MUTATIONS)
