"""pca-pipeline's fast depth: the run's cell certificates and a sample of them, or a thin pass.

Exact and covariance methods: the run certifies every cell of rows from the rows it factors or
sums (count, column means, centred squares, ``G = X_c^T (X_c Q)`` for the seeded probes ``Q``).
Joined, the certificates give ``C Q``, ``trace(C)`` and the mean (:func:`certified`); the run's
own Gram matrix must be ``C`` on ``Q`` (:func:`freivalds`), and so stands for ``C``; a seeded
sample of cells is computed again and must equal its certificates (:func:`cells_again`).
Randomized: one pass gives ``C [V^T, Q]`` (``4 n d (k + PROBES)`` flops, not ``n d^2``).
"""

from __future__ import annotations

import math

import dask
import numpy as np

from daskgpu.toolkit import pcg64
from daskgpu.verification import FALSE_ALARM, Plan, Sampler, compare_probes, replay, tolerance
from daskgpu.verification.bounds import rounding
from daskgpu.verification.probes import normal_reach
from pipelines.pca import check_replay, shared
from pipelines.pca.check import Gram, Reading, own_gram, slack
from pipelines.pca.shared import PROBES, PcaContext

KEYS = ("counts", "means", "squares", "g", "states")


def cell_plan(ctx: PcaContext, depth: str = "fast") -> Plan:
    """The cells computed again: a seeded sample at ``fast``."""
    return Plan.at(depth, ctx.cell_layout().total, Sampler(ctx.sample_seed, "cells"),
                   unit="cells")


def _malformed(ctx: PcaContext, i: int, part) -> str | None:
    cuts, d, part = ctx.cuts(i), ctx.features, part if isinstance(part, dict) else {}
    shapes = {"counts": (len(cuts),), "means": (len(cuts), d), "squares": (len(cuts),),
              "g": (len(cuts), d, PROBES), "states": (len(cuts), pcg64.WORDS)}
    for key, shape in shapes.items():
        if np.shape(part.get(key)) != shape:
            return (f"cell certificates of block {i}: {key} of shape {np.shape(part.get(key))}"
                    f", {shape} expected")
    counts, expected = np.asarray(part["counts"]).tolist(), [b - a for a, b in cuts]
    if counts != expected:
        return (f"cell certificates of block {i}: counts {counts[:4]}... do not tile its "
                f"{ctx.grid.chunks[0][i]} rows in the cells {expected[:4]}...")
    if not all(np.isfinite(np.asarray(part[k], dtype=np.float64)).all() for k in KEYS[1:4]):
        return f"cell certificates of block {i} are not finite"
    return None


def join_certificates(ctx: PcaContext, parts) -> tuple[str | None, Gram | None]:
    """The certificates checked and joined: a problem, or None and their ``Gram``.

    About the mean of all rows: within the cells plus ``n_c (m_c - m)(m_c - m)^T`` between.
    """
    blocks = ctx.grid.blocks
    if not isinstance(parts, list | tuple) or len(parts) != blocks:
        found = len(parts) if isinstance(parts, list | tuple) else type(parts).__name__
        return f"cell certificates: {found} blocks of them for the run's {blocks} blocks", None
    problem = next(filter(None, (_malformed(ctx, i, p) for i, p in enumerate(parts))), None)
    if problem:
        return problem, None
    cells = {key: np.concatenate([np.asarray(p[key]) for p in parts]) for key in KEYS}
    counts, q = cells["counts"].astype(np.float64), ctx.probes()
    mean = counts @ cells["means"] / counts.sum()
    apart = cells["means"] - mean
    cq = cells["g"].sum(axis=0) + apart.T @ (counts[:, None] * (apart @ q))
    trace = float(cells["squares"].sum() + counts @ np.einsum("ij,ij->i", apart, apart))
    return None, Gram(trace, mean, cq=cq, probes=q, cells=cells)


def certified(ctx: PcaContext, r: Reading, verdict) -> None:
    """The run's cell certificates tile the blocks and join into ``C Q``, the trace, the mean."""
    problem, r.gram = join_certificates(ctx, r.raw.get("cells"))
    verdict.note(problem)


def freivalds(ctx: PcaContext, r: Reading, verdict) -> None:
    """The run's own Gram matrix against ``C`` on the probes, within rounding.

    ``|E_ik| <= 2 c s_i s_k`` (``s_i``: column ``i``'s norm, mean included: the cells are
    centred apart), so ``|(E Q)_ij| <= 2 c s_i (s^T |q_j|)``: the magnitude for
    :func:`~daskgpu.verification.compare_probes`, ``d`` terms in the data's dtype, ``n`` in ours.
    """
    own = own_gram(ctx, r, verdict)
    if own is None:
        return
    gram, n, d = r.gram, ctx.samples, ctx.features
    s = np.sqrt(np.maximum(np.diag(own), 0.0) + n * gram.mean**2)
    magnitude = 2 * np.outer(s, s @ np.abs(gram.probes))
    agree, worst, ratio = compare_probes(own @ gram.probes, gram.cq, magnitude, terms=d,
                                         dtype=ctx.dtype, check_terms=n)
    gram.reach = normal_reach(tolerance(float(np.linalg.norm(magnitude)), d, ctx.dtype,
                                        check_terms=n + 1), PROBES)
    i, j = np.unravel_index(worst, gram.cq.shape)
    if verdict.require(agree, f"the run's {r.own_name} is not the data's Gram matrix: "
                              f"({r.own_name} q_{j})_{i} is off X^T X q_{j} by {ratio:.3g} times "
                              f"its rounding bound ({PROBES} seeded normal vectors)"):
        cells = gram.cells["counts"].size
        verdict.establish(f"the run's {r.own_name} is X^T X joined from its {cells} cells' "
                          f"certificates on {PROBES} seeded normal vectors within rounding (one "
                          f"off it by {gram.reach:.3g} passes with probability below "
                          f"{FALSE_ALARM:g})")


def cell_problem(ctx: PcaContext, sums: dict, cells: dict, c: int, q: np.ndarray) -> str | None:
    """How cell ``c`` computed again (``sums``) disagrees with its certificate, or None.

    Generated rows, ``fl(fl(z sigma) V^T)``, are off ``z F`` by ``|E|_F <= c |Z|_F |F|_F``,
    ``c = rounding(d + 2)`` in their dtype (an input's: 0); with ``S = |X|_F`` that moves ``G``
    by ``(2 |E| S + |E|^2) |Q|_2``, the squares by ``2 |E| S + |E|^2``, the mean by ``|E| /
    sqrt(count)``; both sides' sums of ``count + d`` terms add their rounding of ``S^2``.
    """
    d, count = ctx.features, sums["count"]
    if count != int(cells["counts"][c]):
        return f"{count} rows, the certificate counts {int(cells['counts'][c])}"
    err = 0.0 if sums["z2"] is None else rounding(d + 2, ctx.dtype) * math.sqrt(
        sums["z2"] * float(np.sum(shared.spectrum(d) ** 2)))
    s = math.sqrt(sums["norm2"])
    moved, arith = 2 * err * s + err**2, tolerance(s * s, count + d)
    checks = (("X_c^T X_c Q", np.linalg.norm(sums["g"] - cells["g"][c]),
               moved * np.linalg.norm(q, 2) + arith * np.linalg.norm(q)),
              ("sum of squares", abs(sums["squares"] - cells["squares"][c]), moved + arith),
              ("mean", np.linalg.norm(sums["mean"] - cells["means"][c]),
               (err + arith / s) / math.sqrt(count)))
    return next((f"{what} off the certificate's by {off:.3g} (bound {bound:.3g})"
                 for what, off, bound in checks if not off <= bound), None)


def cells_again(ctx: PcaContext, r: Reading, verdict) -> None:
    """A seeded sample of cells computed again on the workers, against their certificates."""
    plan, layout, cells, q = (cell_plan(ctx, verdict.depth), ctx.cell_layout(), r.gram.cells,
                              r.gram.probes)
    picked: dict[int, list[int]] = {}  # a task a block
    for block, j in map(layout.locate, plan):
        picked.setdefault(block, []).append(j)
    shipped = ctx.shipped()
    f, multiplier = dask.delayed(check_replay.framed, pure=True, nout=2)(shipped, q)
    found = replay.on_workers(check_replay.cell_sums, [
        (shipped, i, js, cells["states"][layout.of(i).start:layout.of(i).stop], f, multiplier,
         check_replay.cells_of(ctx, i, js)) for i, js in picked.items()])
    wrong = []
    for i, sums in zip(picked, found, strict=True):
        for j, got in sums:
            why = got if isinstance(got, str) else cell_problem(
                ctx, got, cells, layout.of(i).start + j, q)
            if why:
                wrong.append(f"cell {j} of block {i}: {why}")
    if not wrong:
        verdict.establish(f"{plan.promise} (drawn again or re-read apart, no QR): their "
                          "certificates hold")
        return
    verdict.fail(f"{len(wrong)} of {len(plan)} cells computed again disagree with the run's "
                 f"certificates: {wrong[0]}")
    verdict.fail_all(wrong[1:])


def thin_pass(ctx: PcaContext, r: Reading, verdict) -> None:
    """``C V^T``, ``C Q``, ``trace(C)`` and the mean from one thin pass over every block."""
    v, q = r.array("components"), ctx.probes()
    found = check_replay.products(ctx, np.concatenate([v.T, q], axis=1))
    k = v.shape[0]
    r.gram = Gram(found["trace"], found["mean"], cv=found["cm"][:, :k], cq=found["cm"][:, k:],
                  probes=q)
    verdict.establish(f"X^T (X [V, Q]) in one pass over the {ctx.samples} x {ctx.features} "
                      f"rows apart, no QR ({Plan.every(ctx.grid.blocks).promise})")


def deflated(ctx: PcaContext, r: Reading, verdict) -> None:
    """No variance above the last component's along the probes, outside the components.

    For ``A = P C P``, ``P = I - V^T V``, and ``x = P q``, ``|A x|^2 / x^T A x`` is a Rayleigh
    quotient of ``A`` (at ``A^(1/2) x``): above ``s_k^2`` (and the slack), a larger variance was
    missed. It proves a miss, it cannot exclude every one: the full depth does.
    """
    v, lam, gram = r.array("components"), r.lambdas, r.gram
    bound = float(lam[-1]) + slack(ctx, r)
    x = gram.probes - v.T @ (v @ gram.probes)
    cx = gram.cq - gram.cv @ (v @ gram.probes)
    ax = cx - v.T @ (v @ cx)
    weight = np.einsum("ij,ij->j", x, ax)
    quotient = np.einsum("ij,ij->j", ax, ax) / np.where(weight > 0, weight, np.inf)
    if verdict.fail_all(
            f"a variance of the Gram matrix above component {lam.size - 1}'s lies outside the "
            f"components: Rayleigh quotient {quotient[j]:.12g} along seeded direction {j}, "
            f"s^2 = {lam[-1]:.12g} (bound {bound:.3g})"
            for j in np.flatnonzero(~(quotient <= bound))[:1]):
        verdict.establish(f"no larger variance outside the components along {PROBES} seeded "
                          "directions (a Rayleigh quotient of the deflated Gram matrix)")
