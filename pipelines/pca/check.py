"""Independent verification of pca-pipeline's result (:func:`verify`) and its mutations.

What the check establishes, with ``C`` the centred Gram (scatter) matrix of the data and
``lambda_i = s_i**2 = (samples - 1) * explained_variance_i``:

- the components are orthonormal (``|V V^T - I| <= 16 d eps``: they are computed in float64);
- the explained variances are non-increasing and agree with the singular values, and their
  ratios with the total variance;
- against ``C`` summed here block by block with plain matrix products (each block drawn again,
  or re-read, on the workers, centred on its own means, ``X_c^T X_c`` in float64; blocks joined
  by the pairwise update of the scatter matrix; no QR, no SVD): every component is an
  eigenvector, ``|C v_i - lambda_i v_i| <= tau``; the ``lambda_i`` are ``C``'s largest
  eigenvalues (``numpy.linalg.eigvalsh``, a symmetric tridiagonal method) within ``tau``; and
  the total variance is ``trace(C) / (samples - 1)``;
- for generated data, the explained variances match the population's ``sigma_i**2`` within
  sampling error (below).

The exact and covariance methods also report their own Gram matrix (``R^T R``, or ``C'``): at the
full depth it must be ``C`` within ``tau / 2`` (spectral norm). Under ``--method auto`` a result
that kept the covariance method must pass :func:`pipelines.pca.shared.covariance_shortfall` on the
verified variances (:func:`_check_choice`).

That is the full depth. The fast depth checks the same, and the same mutations fail it, without
the Gram matrix (``--method covariance`` as ``exact`` below, its ``C'`` in place of ``R^T R``):

- ``--method exact`` (:mod:`pipelines.pca.check_cells`): the run certifies every cell of rows
  (``X_c^T (X_c Q)`` for ``PROBES`` seeded standard normal vectors ``Q``, the means, the squares);
  the certificates must tile the blocks and, joined, give ``C Q``, ``trace(C)`` and the mean. The
  run's final R factor (``R^T R = C`` up to rounding) is tested on ``Q`` (Freivalds): with
  ``E = C - R^T R``, ``|E Q|_F <= PROBE_MARGIN tau / 2``. An ``|E|_2 > tau / 2`` passes that with
  probability below 5e-6 (:func:`_missed`); then C's eigenpairs are R^T R's within tau / 2
  (Weyl), every component must satisfy ``|R^T R v_i - lambda_i v_i| <= tau / 2`` (so that
  ``|C v_i - lambda_i v_i| <= tau``) and the ``lambda_i`` must be R^T R's largest (``eigvalsh``)
  within the other half: the full depth's claim, but for that probability. Correct runs give
  ``|E Q|_F`` below 3e-3 tau (measured). A seeded sample of cells is computed again from the
  data and must match its certificates (a fault in a tenth of the cells is caught with
  probability 99.9 %);
- ``--method randomized``: one thin pass (:mod:`pipelines.pca.check_pass`: ``C [V^T, Q]``, its
  trace and the mean, ``4 n d (k + PROBES)`` flops instead of ``n d^2``; generated blocks drawn
  again as ``z`` and never multiplied out into rows): every component is an eigenvector of
  ``C``, and there is no larger variance outside the components along the seeded directions
  (:func:`_check_deflated`, a lower bound on what was missed: it proves a miss, it cannot
  exclude every one; the full depth does);
- the sampling-error test of generated data, as above.

``tau = SAFETY (d u + sqrt(n) eps64) trace(C)``: Householder QR is backward stable, the computed
R being that of ``X + dX`` with ``|dX|_F`` of order ``d u |X|_F`` in the data's dtype (Higham,
*Accuracy and Stability*, Thm 19.4; the factor in the row count that the worst case carries grows
like its square root in practice, Higham and Mary 2019, and the blocks and slices of the tree keep
it short), which moves ``C``'s eigenpairs by ``2 |dX| |X|``; ``sqrt(n) eps64`` covers the float64
sums on both sides. Measured errors are below 1e-3 tau (float32 and float64, 2e5 x 256);
for ``--method randomized`` the residual may also reach ``RANDOMIZED_RESIDUAL`` of the largest
variance (an approximation's error, not rounding).

Sampling error: for Gaussian rows with distinct population variances, a sample eigenvalue has
standard deviation ``sqrt(2 / (n - 1)) sigma_i**2`` and a bias of at most
``(sigma_i**2 / n) sum_j sigma_j**2 / |sigma_i**2 - sigma_j**2|`` (Lawley, 1956, to first order);
the check allows ``SIGMAS`` standard deviations plus twice the bias plus ``tau / (n - 1)``.

It shares no code with the computation (:mod:`pipelines.pca.tasks`, :mod:`daskgpu.data.synthetic`,
:mod:`daskgpu.data.array_input`): it draws or reads the blocks its own way and takes from
:mod:`pipelines.pca.shared` only the seeds, the spectrum, the basis, the cells and the probes.
The run's R factor and certificates are material to test, never trusted: only their agreement
with the data makes its eigenvalues count.
"""

from __future__ import annotations

import importlib
import math

import dask
import numpy as np

from daskgpu.toolkit.numeric import generator, starts, unit_roundoff
from daskgpu.toolkit.registry import Mutation, Verification, Workload
from daskgpu.toolkit.spot_checks import detection
from pipelines.pca import check_cells, check_pass, shared

SAFETY = 10.0
SIGMAS = 6.0
RANDOMIZED_RESIDUAL = 1e-3
# The fast depth's seeded normal vectors (an even number: see _missed), their seed's tag, and
# the share of tau / 2 that |C Q - R^T R Q| may reach.
PROBES = shared.PROBES
PROBE_MARGIN = 0.25
EPS64 = float(np.finfo(np.float64).eps)
KEYS = ("components", "singular_values", "explained_variance", "explained_variance_ratio",
        "total_variance", "samples")


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Orthonormal components, eigenvectors of the Gram matrix, its largest eigenvalues.

    Parameters
    ----------
    workload : Workload
        The run's workload (its context: shape, row blocks, seed or input, dtype, method).
    raw : dict
        The computed result (``raw["result"]``), and the projection's sums where written.
    depth : {"full", "fast"}
        ``full`` sums the Gram matrix blockwise (``n d^2`` flops) and takes its eigenvalues;
        ``fast`` checks the run's R factor against its cells' certificates on the seeded
        vectors ``Q`` and a sample of cells against the data (exact,
        :mod:`pipelines.pca.check_cells`), or makes one thin pass, ``X_c^T (X_c [V, Q])``
        (randomized, :mod:`pipelines.pca.check_pass`); see the module.

    Returns
    -------
    Verification
        Passed, or failed naming what disagreed.
    """
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or any(key not in result for key in KEYS):
        return Verification(False, f"result {type(raw).__name__} lacks {', '.join(KEYS)}")
    ctx = workload.context
    failure = _check_form(ctx, result)
    if failure:
        return Verification(False, failure)
    method = taken(ctx, result)
    if depth == "full":
        gram = recompute(ctx)
        checks = (_check_total, _check_eigenvectors, _check_eigenvalues, _check_spectrum)
        if method != "randomized":
            checks += (_check_run_gram,)
    elif method in ("exact", "covariance"):
        failure, gram = check_cells.certified(ctx, raw.get("cells"), probes(ctx))
        if failure:
            return Verification(False, failure)
        checks = (_check_total, _check_freivalds, _check_eigenvectors, _check_certificate,
                  _check_spectrum, _check_cells)
    else:
        gram = one_pass(ctx, result)
        checks = (_check_total, _check_eigenvectors, _check_deflated, _check_spectrum)
    if ctx["method"] == "auto" and method == "covariance":
        checks += (_check_choice,)
    for check in checks:
        failure = check(ctx, result, gram)
        if failure:
            return Verification(False, failure)
    if ctx.get("project") is not None:
        failure = check_projection(ctx, raw, gram)
        if failure:
            return Verification(False, failure)
    return Verification(True, _passed(ctx, result, gram, depth))


def _passed(ctx: dict, result: dict, gram: dict, depth: str) -> str:
    k, (n, d) = len(result["explained_variance"]), ctx["shape"]
    known = "; explained variances within sampling error of sigma**2" if ctx["input"] is None \
        else ""
    projected = ("; the projection's columns sum to 0 and their squares to s^2"
                 if ctx.get("project") is not None else "")
    tau = f"within tau = {tolerance(ctx, gram):.3g}{known}{projected}"
    if depth == "full":
        return (f"{k} components orthonormal and eigenvectors of the centred Gram matrix X^T X "
                f"({d} x {d}, summed blockwise over {n} rows apart, no QR), their variances its "
                f"{k} largest eigenvalues, {tau}")
    blocks = len(ctx["row_chunks"])
    if "cells" in gram:
        name = "Gram matrix" if taken(ctx, result) == "covariance" else "R^T R"
        drawn, population = gram["sampled"]
        return (f"the run's {name} agrees with the centred Gram matrix X^T X joined from its "
                f"{population} cells' certificates on {PROBES} seeded normal vectors (one "
                f"off it by tau/2 passes with probability below {_missed():.1g}); {k} "
                f"components orthonormal and eigenvectors of the run's {name} within tau/2, their "
                f"variances its {k} largest eigenvalues; {detection(drawn, population, 'cells')}"
                f" (drawn again or re-read apart, no QR: their certificates hold), {tau}")
    largest = (f"no larger variance found outside the components along {PROBES} seeded "
               "directions (a Rayleigh quotient of the deflated Gram matrix)")
    return (f"{k} components orthonormal and eigenvectors of the centred Gram matrix through "
            f"X^T (X V), one pass over the {n} x {d} rows apart, no QR "
            f"({detection(blocks, blocks)}); {largest}, {tau}")


def tolerance(ctx: dict, gram: dict) -> float:
    """``tau``: the bound on ``|C v - lambda v|`` and on the eigenvalues (see the module)."""
    n, d = ctx["shape"]
    u = unit_roundoff(ctx["dtype"])
    return SAFETY * (d * u + math.sqrt(n) * EPS64) * gram["trace"]


def _slack(ctx: dict, gram: dict, largest: float) -> float:
    tau = tolerance(ctx, gram)
    if ctx["method"] == "randomized":
        return max(tau, RANDOMIZED_RESIDUAL * largest)
    return tau


def _check_form(ctx: dict, result: dict) -> str | None:
    k, (n, d) = ctx["components"], ctx["shape"]
    if taken(ctx, result) not in ALLOWED[ctx["method"]]:
        return (f"the result says it took the {taken(ctx, result)} method; --method "
                f"{ctx['method']} takes {' or '.join(ALLOWED[ctx['method']])}")
    v = np.asarray(result["components"], dtype=np.float64)
    variance = np.asarray(result["explained_variance"], dtype=np.float64)
    if v.shape != (k, d) or variance.shape != (k,) or int(result["samples"]) != n:
        return (f"components of shape {v.shape}, {variance.shape} variances over "
                f"{result['samples']} samples; {(k, d)}, ({k},) over {n} expected")
    if not (np.isfinite(v).all() and np.isfinite(variance).all()):
        return "components or explained variances are not finite"
    off = float(np.abs(v @ v.T - np.eye(k)).max())
    if off > 16 * d * EPS64:
        return f"components not orthonormal: |V V^T - I| reaches {off:.3g}"
    if (variance < 0).any() or (np.diff(variance) > 0).any():
        return f"explained variances not in descending order: {variance[:6]}"
    s = np.asarray(result["singular_values"], dtype=np.float64)
    expected = s**2 / max(n - 1, 1)
    if not np.allclose(variance, expected, rtol=8 * EPS64, atol=0):
        return "explained variances are not the squared singular values over samples - 1"
    ratio = np.asarray(result["explained_variance_ratio"], dtype=np.float64)
    total = float(result["total_variance"])
    if not np.allclose(ratio * total, variance, rtol=8 * EPS64, atol=0):
        return "explained variance ratio times the total variance is not the explained variance"
    return None


def _check_total(ctx: dict, result: dict, gram: dict) -> str | None:
    n = ctx["shape"][0]
    expected = gram["trace"] / max(n - 1, 1)
    got = float(result["total_variance"])
    bound = tolerance(ctx, gram) / max(n - 1, 1)
    if not abs(got - expected) <= bound:
        return (f"total variance {got:.12g}, trace of the Gram matrix gives {expected:.12g} "
                f"(bound {bound:.3g})")
    return None


def _lambdas(ctx: dict, result: dict) -> np.ndarray:
    return np.asarray(result["explained_variance"], dtype=np.float64) * max(ctx["shape"][0] - 1, 1)


def _check_eigenvectors(ctx: dict, result: dict, gram: dict) -> str | None:
    v = np.asarray(result["components"], dtype=np.float64)
    lam = _lambdas(ctx, result)
    bound = _slack(ctx, gram, float(lam[0]) if lam.size else 0.0)
    if "scatter" in gram:
        residual = np.linalg.norm(v @ gram["scatter"] - lam[:, None] * v, axis=1)
        what, product = "the blockwise Gram matrix", "C v"
    elif "cells" in gram:  # C within tau/2 of the run's (_check_freivalds): the rest is for v
        run, name, failure = run_gram(ctx, result)
        if failure:
            return failure
        residual = np.linalg.norm(v @ run - lam[:, None] * v, axis=1)
        what, product = f"the run's {name} (the data's Gram matrix within tau/2)", f"{name} v"
        bound /= 2
    else:
        residual = np.linalg.norm(gram["cv"].T - lam[:, None] * v, axis=1)
        what, product = "the Gram matrix X^T X", "X^T (X v)"
    for i, r in enumerate(residual):
        if not r <= bound:
            return (f"component {i} is no eigenvector of {what}: "
                    f"|{product} - s^2 v| = {r:.3g} > {bound:.3g} (s^2 = {lam[i]:.12g})")
    return None


def _check_eigenvalues(ctx: dict, result: dict, gram: dict) -> str | None:
    lam = _lambdas(ctx, result)
    top = np.linalg.eigvalsh(gram["scatter"])[::-1][:lam.size]
    bound = _slack(ctx, gram, float(top[0]) if top.size else 0.0)
    for i, (got, expected) in enumerate(zip(lam, top, strict=True)):
        if not abs(got - expected) <= bound:
            return (f"component {i}: s^2 = {got:.12g}, the Gram matrix's eigenvalue {i} is "
                    f"{expected:.12g} (bound {bound:.3g}): not its largest eigenvalues")
    return None


# --------------------------------------------------------------------------- the fast depth


def probes(ctx: dict) -> np.ndarray:
    """The fast depth's seeded standard normal vectors ``Q`` (:func:`shared.probes`)."""
    n, d = ctx["shape"]
    return shared.probes(ctx["seed"] if ctx["input"] is None else None, n, d)


def one_pass(ctx: dict, result: dict) -> dict:
    """``C V^T``, ``C Q``, ``trace(C)`` and the mean from one thin pass over the data."""
    v = np.asarray(result["components"], dtype=np.float64)
    q = probes(ctx)
    found = check_pass.products(ctx, np.concatenate([v.T, q], axis=1))
    k = v.shape[0]
    return {"rows": found["rows"], "mean": found["mean"], "trace": found["trace"],
            "cv": found["cm"][:, :k], "cq": found["cm"][:, k:], "probes": q}


def _missed() -> float:
    """How often a Gram matrix off ``R^T R`` by more than tau/2 passes the certificate's test.

    ``P(chi^2_PROBES <= PROBE_MARGIN^2)`` (:func:`_check_certificate`): the squared weights of
    the error's top eigenvector in the ``PROBES`` normal vectors add up to that chi-square; for
    an even number of degrees of freedom its lower tail is a Poisson tail.
    """
    half = PROBE_MARGIN**2 / 2
    return math.exp(-half) * math.fsum(half**i / math.factorial(i)
                                       for i in range(PROBES // 2, PROBES // 2 + 40))


def taken(ctx: dict, result: dict) -> str:
    """The method the result says it took (``auto`` runs covariance, or exact after it)."""
    default = "covariance" if ctx["method"] == "auto" else ctx["method"]
    return str(result.get("method", default))


ALLOWED = {"auto": ("covariance", "exact"), "covariance": ("covariance",), "exact": ("exact",),
           "randomized": ("randomized",)}


def run_gram(ctx: dict, result: dict) -> tuple[np.ndarray, str, str | None]:
    """The run's own Gram matrix: ``R^T R`` of its R factor (exact), or its ``gram``.

    Returns the matrix, its name in a failure, and a failure where it is missing or malformed.
    """
    d = ctx["shape"][1]
    covariance = taken(ctx, result) == "covariance"
    key, name = ("gram", "Gram matrix") if covariance else ("r", "R^T R")
    m = np.asarray(result.get(key, np.empty((0, 0))), dtype=np.float64)
    good = m.ndim == 2 and m.shape[1] == d and (not covariance or m.shape[0] == d)
    if not good or not np.isfinite(m).all():
        return m, name, (f"the run's {key}: shape {m.shape}, finite {bool(np.isfinite(m).all())}; "
                         f"{'d x d' if covariance else 'R x d'} with d = {d} expected, to check "
                         "the variances against the Gram matrix's")
    return (m if covariance else m.T @ m), name, None


def _check_freivalds(ctx: dict, result: dict, gram: dict) -> str | None:
    """The run's Gram matrix (``R^T R``, or its own) against ``C`` on the probes (see below)."""
    run, name, failure = run_gram(ctx, result)
    if failure:
        return failure
    lam = _lambdas(ctx, result)
    half = _slack(ctx, gram, float(lam[0]) if lam.size else 0.0) / 2
    q = gram["probes"]
    off = math.sqrt(float(((gram["cq"] - run @ q) ** 2).sum()))
    if not off <= PROBE_MARGIN * half:
        return (f"the run's {name} is not the data's Gram matrix: |X^T X q - {name} q| = "
                f"{off:.3g} over {PROBES} seeded vectors (bound {PROBE_MARGIN * half:.3g})")
    return None


def _check_certificate(ctx: dict, result: dict, gram: dict) -> str | None:
    """The variances against the run's Gram matrix's largest eigenvalues (after Freivalds).

    With ``E = C - R^T R`` (or the run's own Gram matrix): ``sum |E q|^2 >= |E|_2^2
    chi^2_PROBES``, so the test of :func:`_check_freivalds` lets an ``|E|_2 > tau / 2``
    through with probability :func:`_missed`, and then (Weyl) ``C``'s eigenvalues are the
    run's within tau / 2: the variances must be its largest within the other half of tau.
    """
    run, name, failure = run_gram(ctx, result)
    if failure:
        return failure
    lam = _lambdas(ctx, result)
    half = _slack(ctx, gram, float(lam[0]) if lam.size else 0.0) / 2
    top = np.linalg.eigvalsh(run)[::-1][:lam.size]
    for i, (got, expected) in enumerate(zip(lam, top, strict=True)):
        if not abs(got - expected) <= half:
            return (f"component {i}: s^2 = {got:.12g}, eigenvalue {i} of {name} (the Gram "
                    f"matrix within tau/2) is {expected:.12g} (bound {half:.3g}): not the Gram "
                    "matrix's largest eigenvalues")
    return None


def _check_run_gram(ctx: dict, result: dict, gram: dict) -> str | None:
    """Full depth: the run's Gram matrix is the blockwise one within tau / 2 (spectral norm)."""
    run, name, failure = run_gram(ctx, result)
    if failure:
        return failure
    off = float(np.abs(np.linalg.eigvalsh(run - gram["scatter"])).max())
    bound = tolerance(ctx, gram) / 2
    if not off <= bound:
        return (f"the run's {name} is not the data's Gram matrix: |{name} - X^T X|_2 = "
                f"{off:.3g} (bound {bound:.3g})")
    return None


def _check_choice(ctx: dict, result: dict, gram: dict) -> str | None:
    """``--method auto`` kept the covariance method only where it vouches for every variance.

    The rule of :func:`pipelines.pca.shared.covariance_shortfall`, on the verified variances
    and ``trace(C)``, with a factor 2 of room for the run's own rounding of its bound.
    """
    n, d = ctx["shape"]
    short = shared.covariance_shortfall(_lambdas(ctx, result), n, d, gram["trace"],
                                        ctx["dtype"], room=2.0)
    if short is not None:
        i, ours, theirs = short
        return (f"the covariance method was kept where it cannot vouch for variance {i}: its "
                f"relative error bound {ours:.3g} exceeds {shared.ACCURACY:.0e} and the exact "
                f"method's {theirs:.3g}; auto takes the exact method there")
    return None


def _check_cells(ctx: dict, result: dict, gram: dict) -> str | None:
    """A seeded sample of the cells computed again against their certificates."""
    failure, gram["sampled"] = check_cells.spot_check(ctx, gram)
    return failure


def _check_deflated(ctx: dict, result: dict, gram: dict) -> str | None:
    """No variance above the last component's along the probes, outside the components.

    ``A = P C P`` with ``P = I - V^T V`` is positive semi-definite; for ``x = P q``,
    ``|A x|^2 / x^T A x`` is a Rayleigh quotient of ``A`` (at ``A^(1/2) x``), hence at most its
    largest eigenvalue. Above ``s_k^2`` (and the slack), a larger variance has been missed.
    """
    v = np.asarray(result["components"], dtype=np.float64)
    lam = _lambdas(ctx, result)
    if not lam.size:
        return None
    bound = float(lam[-1]) + _slack(ctx, gram, float(lam[0]))
    q = gram["probes"]
    x = q - v.T @ (v @ q)
    cx = gram["cq"] - gram["cv"] @ (v @ q)
    ax = cx - v.T @ (v @ cx)
    for j in range(q.shape[1]):
        weight = float(x[:, j] @ ax[:, j])
        quotient = float(ax[:, j] @ ax[:, j]) / weight if weight > 0 else 0.0
        if not quotient <= bound:
            return (f"a variance of the Gram matrix above component {lam.size - 1}'s lies "
                    f"outside the components: Rayleigh quotient {quotient:.12g} along seeded "
                    f"direction {j}, s^2 = {lam[-1]:.12g} (bound {bound:.3g})")
    return None


def sampling_bound(sigma2: np.ndarray, i: int, n: int) -> float:
    """Allowed ``|variance_i - sigma_i**2|`` from sampling alone (see the module)."""
    others = np.delete(sigma2, i)
    gaps = np.abs(sigma2[i] - others)
    bias = sigma2[i] / n * float(np.sum(others / np.maximum(gaps, 1e-300)))
    return SIGMAS * math.sqrt(2 / max(n - 1, 1)) * sigma2[i] + 2 * bias


def _check_spectrum(ctx: dict, result: dict, gram: dict) -> str | None:
    if ctx["input"] is not None:
        return None
    n, d = ctx["shape"]
    sigma2 = shared.spectrum(d) ** 2
    variance = np.asarray(result["explained_variance"], dtype=np.float64)
    rounding = _slack(ctx, gram, float(variance[0]) * (n - 1)) / (n - 1)
    rounding += SAFETY * 2 * unit_roundoff(ctx["dtype"]) * math.sqrt(sigma2.sum())
    for i, got in enumerate(variance):
        bound = sampling_bound(sigma2, i, n) + rounding
        if not abs(got - sigma2[i]) <= bound:
            return (f"explained variance {i}: {got:.6g}, the known spectrum gives sigma^2 = "
                    f"{sigma2[i]:.6g} (sampling bound {bound:.3g})")
    return None


def check_projection(ctx: dict, raw: dict, gram: dict) -> str | None:
    """The written projection ``T = X_c V^T``: its columns sum to 0, their squares to s^2.

    ``T`` is computed in the data's dtype: each column is off by at most ``(d + 2) u S`` in norm,
    ``S = |X_c|_F + sqrt(n) |mean|`` (the dot products and the centring), which bounds its
    squares through ``2 |T_i| |dT_i|`` and its sum through ``sqrt(n) |dT_i|``.
    """
    n, d = ctx["shape"]
    u = unit_roundoff(ctx["dtype"])
    lam = _lambdas(ctx, raw["result"])
    sums = np.asarray(raw.get("projected_sums"), dtype=np.float64)
    squares = np.asarray(raw.get("projected_squares"), dtype=np.float64)
    if sums.shape != lam.shape or squares.shape != lam.shape:
        return (f"projection: column sums {sums.shape}, squares {squares.shape}; "
                f"{lam.shape} expected")
    spread = math.sqrt(gram["trace"]) + math.sqrt(n) * float(
        np.linalg.norm(gram["mean"]))
    column = SAFETY * (d + 2) * u * spread
    tau = _slack(ctx, gram, float(lam[0]) if lam.size else 0.0)
    for i in range(lam.size):
        bound = tau + 2 * math.sqrt(lam[i]) * column + column**2
        if not abs(squares[i] - lam[i]) <= bound:
            return (f"projection on component {i}: sum of squares {squares[i]:.12g}, s^2 is "
                    f"{lam[i]:.12g} (bound {bound:.3g})")
        bound = math.sqrt(n) * column + SAFETY * n * EPS64 * math.sqrt(n) * spread
        if not abs(sums[i]) <= bound:
            return (f"projection on component {i}: its column sums to {sums[i]:.6g}, not 0 "
                    f"(bound {bound:.3g}): not centred")
    return None


# --------------------------------------------------------------------------- recomputation


def block_of(ctx: dict, i: int):
    """Block ``i`` of rows, in the backend's library: drawn again as specified, or re-read."""
    n, d = ctx["shape"]
    r0 = int(starts(ctx["row_chunks"])[i])
    rows = ctx["row_chunks"][i]
    xp = importlib.import_module(ctx["library"])
    if ctx["input"] is not None:
        source = ctx["input"]
        if source.kind == "zarr":
            import zarr

            stored = zarr.open_array(source.path, mode="r")
        else:
            stored = np.load(source.path, mmap_mode="r")
        return xp.asarray(np.asarray(stored[r0:r0 + rows]))
    sequence = np.random.SeedSequence(shared.data_seed(ctx["seed"]), spawn_key=(i,))
    rng = generator(ctx["library"], sequence)
    z = rng.standard_normal((rows, d), dtype=ctx["dtype"])
    sigma = xp.asarray(shared.spectrum(d), dtype=ctx["dtype"])
    basis = xp.asarray(shared.basis(ctx["seed"], d), dtype=ctx["dtype"])
    return (z * sigma) @ basis.T


def block_scatter(ctx: dict, i: int) -> tuple:
    """``(rows, mean, X_c^T X_c)`` of block ``i`` in float64, the block centred on its means."""
    x = block_of(ctx, i).astype(np.float64)
    mean = x.mean(axis=0)
    centred = x - mean
    scatter = centred.T @ centred
    host = (lambda a: a.get()) if hasattr(scatter, "get") else np.asarray
    return x.shape[0], host(mean), host(scatter)


def join(a: tuple, b: tuple) -> tuple:
    """The scatter of two blocks' union: ``S_a + S_b + (n_a n_b / n) d d^T``."""
    n = a[0] + b[0]
    d = b[1] - a[1]
    return n, a[1] + d * (b[0] / n), a[2] + b[2] + (a[0] * b[0] / n) * np.outer(d, d)


def recompute(ctx: dict) -> dict:
    """The centred Gram matrix of all rows, summed on the workers block by block."""
    level = [dask.delayed(block_scatter, pure=True)(ctx, i) for i in range(len(ctx["row_chunks"]))]
    while len(level) > 1:
        level = [dask.delayed(join, pure=True)(level[i], level[i + 1])
                 for i in range(0, len(level) - 1, 2)] + ([level[-1]] if len(level) % 2 else [])
    rows, mean, scatter = dask.compute(level[0])[0]
    return {"rows": rows, "mean": mean, "scatter": scatter, "trace": float(np.trace(scatter))}


# --------------------------------------------------------------------------- mutations


def _altered(raw: dict, change) -> dict:
    result = {key: (np.array(value, dtype=np.float64, copy=True) if isinstance(value, np.ndarray)
                    else value) for key, value in raw["result"].items()}
    change(result)
    return {**raw, "result": result}


def _rotated(result: dict) -> None:
    v = result["components"]
    angle = math.radians(5)
    v[0], v[1] = (math.cos(angle) * v[0] + math.sin(angle) * v[1],
                  -math.sin(angle) * v[0] + math.cos(angle) * v[1])


def _scaled_value(result: dict) -> None:
    result["singular_values"][0] *= 1.01
    result["explained_variance"][0] *= 1.01**2
    result["explained_variance_ratio"][0] *= 1.01**2


def _perturbed(result: dict) -> None:
    v = result["components"]
    last = v.shape[0] - 1
    v[last] += 1e-3 * np.roll(v[last], 1)
    v[last] /= np.linalg.norm(v[last])


def _swapped(result: dict) -> None:
    for key in ("components", "singular_values", "explained_variance",
                "explained_variance_ratio"):
        result[key][[0, 1]] = result[key][[1, 0]]


def _gram_altered(result: dict) -> None:
    if "gram" in result:
        result["gram"] *= 1.01
    elif "r" in result:
        result["r"] *= math.sqrt(1.01)


def _total_altered(result: dict) -> None:
    result["total_variance"] *= 1.01
    result["explained_variance_ratio"] /= 1.01


MUTATIONS = (
    Mutation("two components rotated into each other by 5 degrees",
             lambda raw: _altered(raw, _rotated), r"component [01] is no eigenvector"),
    Mutation("a singular value scaled by 1.01", lambda raw: _altered(raw, _scaled_value),
             r"component 0 is no eigenvector .*\(s\^2 = \S+\)"),
    Mutation("a component perturbed by 0.1 %", lambda raw: _altered(raw, _perturbed),
             r"^components not orthonormal"),
    Mutation("the first two components swapped", lambda raw: _altered(raw, _swapped),
             r"^explained variances not in descending order"),
    Mutation("the total variance altered by 1 %", lambda raw: _altered(raw, _total_altered),
             r"^total variance \S+, trace of the Gram matrix gives"),
    # What the exact and covariance methods report beside the components (randomized: none).
    Mutation("the run's Gram matrix (R^T R) off by 1 %", lambda raw: _altered(raw, _gram_altered),
             r"the run's (Gram matrix|R\^T R) is not the data's Gram matrix"),
)
