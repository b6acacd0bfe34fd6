"""Independent verification of fft-pipeline's result (:func:`verify`) and its mutations.

What the check establishes about the spectrum X of the n x q input x (N = n q points):

- Parseval's identity: the spectrum's sum of squares (rfft2's half counted twice where it
  stands for its mirror image) equals N sum |x|^2 (forward) or sum |x|^2 / N (inverse;
  for irfft2 the half spectrum's squares weighted so, its Hermitian part in columns 0, q/2),
  where sum |x|^2 is summed here in a separate pass over the input, drawn again (or re-read)
  on the workers.
- Sampled cells: X at one seeded cell in every column block of the spectrum, and a few more,
  equals the DFT sum over the whole input, sum_rc x_rc exp(-+2 pi i (u r / n + v c / q)),
  computed here as products with exponentials in float64 (no FFT).
- For generated data: every planted sinusoid shows as a peak at its frequency with its
  amplitude and phase (N A e^(i phi), half of it for a cosine, A e^(i phi) at the negated
  frequency for the inverse), and no other reported cell stands above the noise. For an input:
  the largest reported cells (the reported maximum among them) equal their DFT sums.

Tolerances: the FFT's norm-wise rounding error, about log2(N) * 6u relative for N
points in the transform's type (u its unit roundoff; Higham, *Accuracy and Stability of
Numerical Algorithms*, 2nd ed., section 24.1), with a safety factor; a sampled cell may be off
by that much of the spectrum's norm, plus the float64 error of the DFT sum; a peak, by ten
standard deviations of the noise's transform on top.

That is depth full. Depth fast draws the input again only at a seeded sample of its rows (an
input file is re-read whole) and otherwise reads the certificates the run computed beside its
answer (:mod:`pipelines.fft.check_fast`): the same Parseval identity, sampled cells and peaks,
from the input's certified squares and products, and the spectrum's projection X s against
W (x W s) at a seeded sample of its rows.

It shares no code with the computation (:mod:`pipelines.fft.tasks`, ``numpy.fft``/``cupy.fft``,
:mod:`daskgpu.data.array_input`): it draws and reads the input its own way
(:mod:`pipelines.fft.check_recompute`) and takes from
:mod:`pipelines.fft.shared` only the seeds, the planted sinusoids, the sampled cells and the
projection's weights (and their transform in closed form).
"""

from __future__ import annotations

import math

import numpy as np

from daskgpu.toolkit.registry import Mutation, Verification, Workload
from pipelines.fft import check_fast, shared
from pipelines.fft.check_recompute import recompute

SAFETY = 2.0
EPS64 = float(np.finfo(np.float64).eps)
TINY = float(np.finfo(np.float64).tiny)
NOISE_SIGMAS = 10.0  # a peak, or a cell that is not one, may stand this far from its value
CHECKED_PEAKS = 3  # an input's largest reported cells recomputed as DFT sums


def verify(workload: Workload, raw, depth: str = "full") -> Verification:
    """Parseval's identity, sampled DFT cells and the planted peaks (see the module).

    ``depth="fast"``: from the run's certificates, the input drawn again at sampled rows.
    """
    result = raw.get("result") if isinstance(raw, dict) else None
    if not isinstance(result, dict) or "column_squares" not in result:
        return Verification(False, f"result {type(raw).__name__} carries no per-block material")
    ctx = workload.context
    failure = _check_shapes(ctx, result) or _check_totals(result)
    if failure:
        return Verification(False, failure)
    if depth == "fast":
        return _verify_fast(ctx, raw, result)
    peaks = _largest_reported(result)[:2] if ctx["source"] is not None else ([], [])
    again = recompute(ctx, peaks)
    checks = [_check_parseval, _check_samples]
    checks.append(_check_peaks if ctx["source"] is None else _check_largest)
    for check in checks:
        failure = check(ctx, result, again)
        if failure:
            return Verification(False, failure)
    n, m = ctx["n"], ctx["m"]
    return Verification(True, (
        f"Parseval's identity holds for the {n} x {m} spectrum against the input's sum of "
        f"squares taken apart; {len(result['samples'])} sampled cells agree with DFT sums over "
        f"the input within the rounding bound of {ctx['dtype']}"
        f"{_peaks_found(ctx, len(again['peaks']))}"))


def _peaks_found(ctx: dict, checked: int) -> str:
    if ctx["source"] is None:
        return (f"; all {len(_planted(ctx)['u'])} planted peaks at their frequencies with their "
                "amplitudes, nothing else above the noise")
    return (f"; the {checked} largest reported cells agree with their DFT sums "
            "(an input has no planted peaks)")


def _verify_fast(ctx: dict, raw: dict, result: dict) -> Verification:
    """Depth fast: the run's certificates checked apart (:mod:`pipelines.fft.check_fast`)."""
    run = check_fast.run_certificates(ctx, raw.get("lines"))
    if isinstance(run, str):
        return Verification(False, run)
    peak_rows, peak_cols, peak_values = (_largest_reported(result) if ctx["source"] is not None
                                         else ([], [], []))
    rows = check_fast.rows_to_check(ctx)
    again = check_fast.rows_again(ctx, rows, check_fast.columns(ctx, peak_cols))
    failure = check_fast.check_rows(ctx, run, again)
    if failure:
        return Verification(False, failure)
    # the input's side: a file's every row re-read here, or the run's rows, checked above
    products, squares = ((again["products"], again["squares"]) if ctx["source"] is not None
                         else run)
    weights = check_fast.row_weights(ctx)
    total = check_fast.certified_squares(ctx, squares, again)
    l1 = (math.fsum((weights * again["bound"][:, 1]).tolist()) if ctx["source"] is not None
          else math.sqrt(ctx["n"] * ctx["q"] * total))
    like = {"squares": total, "l1": l1}
    norm = math.sqrt(max(_spectrum_scale(ctx) * math.fsum((weights * squares).tolist()),
                         _spectrum_scale(ctx) * total, _weighted_squares(ctx, result)))
    cells = shared.sampled_cells(ctx["n"], ctx["col_chunks"], ctx["check_seed"])
    entries = check_fast.entries_to_check(ctx)
    k = run[0].shape[1]
    failure = (
        _check_parseval(ctx, result, like, summed=ctx["n"] + ctx["q"] + 8)
        or _check_cells(ctx, like, "sampled cell", *cells, result["samples"],
                        check_fast.dft_of_rows(ctx, cells[0], products[:, 1:k]))
        or check_fast.check_projection(ctx, result, products, norm * relative_bound(ctx),
                                       norm, entries)
        or (_check_peaks(ctx, result, like) if ctx["source"] is None else _check_cells(
            ctx, like, "reported peak", peak_rows, peak_cols, peak_values,
            check_fast.dft_of_rows(ctx, peak_rows, products[:, k:]))))
    if failure:
        return Verification(False, failure)
    return Verification(True, (
        f"Parseval's identity holds for the {ctx['n']} x {ctx['m']} spectrum against the "
        f"input's certified sum of squares; {len(result['samples'])} sampled cells agree with "
        f"DFT sums over the input's certified rows within the rounding bound of "
        f"{ctx['dtype']}; {check_fast.detail(ctx, len(rows), len(entries))}"
        f"{_peaks_found(ctx, len(peak_rows))}"))


# --------------------------------------------------------------------------- tolerances


def relative_bound(ctx: dict) -> float:
    """Norm-wise relative error bound of the run's 2-D FFT in its type."""
    unit = float(np.finfo(np.dtype(ctx["dtype"])).eps) / 2
    points = ctx["n"] * ctx["q"]
    return SAFETY * max(1.0, math.log2(max(points, 2))) * 6 * unit


def _spectrum_scale(ctx: dict) -> float:
    """The full spectrum's sum of |X|^2 per unit of the input's sum of |x|^2."""
    points = float(ctx["n"]) * ctx["q"]
    return 1.0 / points if ctx["inverse"] else points


def _noise_bound(ctx: dict) -> float:
    """Ten standard deviations of one cell of the noise's transform."""
    sigma = shared.noise_sigma(ctx["real"])
    root = math.sqrt(ctx["n"] * ctx["q"])
    return NOISE_SIGMAS * (sigma / root if ctx["inverse"] else sigma * root)


# --------------------------------------------------------------------------- checks


def _check_shapes(ctx: dict, result: dict) -> str | None:
    cells = shared.sampled_cells(ctx["n"], ctx["col_chunks"], ctx["check_seed"])[0]
    expected = {"column_squares": (ctx["m"],), "samples": (len(cells),),
                "col_chunks": (len(ctx["col_chunks"]),)}
    for key, shape in expected.items():
        got = np.shape(result.get(key))
        if got != shape:
            return (f"{key}: shape {got} for a {ctx['n']} x {ctx['m']} spectrum, {shape} "
                    "expected (a block dropped or counted twice)")
    if tuple(result["col_chunks"]) != tuple(ctx["col_chunks"]):
        return f"col_chunks {tuple(result['col_chunks'])}: not the spectrum's column blocks"
    rows, cols = np.asarray(result["peak_rows"]), np.asarray(result["peak_cols"])
    if not (rows.shape == cols.shape == np.shape(result["peak_values"])):
        return "peak rows, columns and values differ in length"
    if rows.size and (rows.min() < 0 or rows.max() >= ctx["n"] or cols.min() < 0
                      or cols.max() >= ctx["m"]):
        return "a reported peak lies outside the spectrum"
    return None


def _check_totals(result: dict) -> str | None:
    squares = np.asarray(result["column_squares"], dtype=np.float64)
    if not (squares >= 0).all():
        return "a column's sum of squares is negative or NaN"
    total = math.fsum(squares.tolist())
    if not abs(result["sum_of_squares"] - total) <= (len(squares) + 2) * EPS64 * total + TINY:
        return (f"sum of squares {result['sum_of_squares']!r} is not the total of its "
                f"columns', {total!r}")
    return None


def _weighted_squares(ctx: dict, result: dict) -> float:
    """The full spectrum's sum of squares from the reported columns' (rfft2's weighted)."""
    weights = shared.column_weights(ctx["q"], ctx["m"], ctx["real"])
    return math.fsum((weights * np.asarray(result["column_squares"])).tolist())


def _check_parseval(ctx: dict, result: dict, again: dict, summed: int = 0) -> str | None:
    """``summed``: terms of the input's sums of squares summed in order (their rounding)."""
    got = _weighted_squares(ctx, result)
    expected = _spectrum_scale(ctx) * again["squares"]
    rel = relative_bound(ctx)
    summing = (math.log2(max(2, ctx["n"] * ctx["q"])) + 4 + summed) * EPS64
    tolerance = (2 * rel + rel * rel + 2 * summing) * expected + TINY
    if not abs(got - expected) <= tolerance:
        return (f"Parseval's identity fails: the spectrum's sum of squares is {got:.15g}, the "
                f"input's gives {expected:.15g} (off by {abs(got - expected):.3g}, bound "
                f"{tolerance:.3g})")
    return None


def _cell_tolerance(ctx: dict, again: dict) -> float:
    norm = math.sqrt(_spectrum_scale(ctx) * again["squares"])
    scale = 1.0 / (ctx["n"] * ctx["q"]) if ctx["inverse"] else 1.0
    sums = 4 * max(ctx["n"], ctx["q"]) + 8
    return relative_bound(ctx) * norm + sums * EPS64 * again["l1"] * scale + TINY


def _check_samples(ctx: dict, result: dict, again: dict) -> str | None:
    rows, cols = shared.sampled_cells(ctx["n"], ctx["col_chunks"], ctx["check_seed"])
    return _check_cells(ctx, again, "sampled cell", rows, cols, result["samples"],
                        again["cells"])


def _largest_reported(result: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows, columns and values of the largest reported cells (the reported maximum first)."""
    values = np.asarray(result["peak_values"])
    picked = np.argsort(-np.abs(values), kind="stable")[:CHECKED_PEAKS]
    return (np.asarray(result["peak_rows"], np.int64)[picked],
            np.asarray(result["peak_cols"], np.int64)[picked], values[picked])


def _check_largest(ctx: dict, result: dict, again: dict) -> str | None:
    rows, cols, got = _largest_reported(result)
    return _check_cells(ctx, again, "reported peak", rows, cols, got, again["peaks"])


def _check_cells(ctx: dict, again: dict, what: str, rows, cols, got, expected) -> str | None:
    """The first of the cells whose reported value is off its DFT sum, in one line."""
    tolerance = _cell_tolerance(ctx, again)
    for s, (value, sum_) in enumerate(zip(got, expected, strict=True)):
        # irfft2's cells are of its real result x, held transposed
        cell = (f"x[{cols[s]}, {rows[s]}]" if ctx.get("half_inverse") else
                f"X[{rows[s]}, {cols[s]}]")
        if not abs(value - sum_) <= tolerance:
            return (f"{what} {cell}: {value:.10g} reported, {sum_:.10g} as "
                    f"a DFT sum over the input (off by {abs(value - sum_):.3g}, bound "
                    f"{tolerance:.3g})")
    return None


def _planted(ctx: dict) -> dict:
    return shared.signal(ctx["seed"], ctx["n"], ctx["real"], ctx["q"])


def expected_peaks(ctx: dict) -> list[tuple[int, int, complex]]:
    """Where each planted sinusoid shows in the spectrum, and its value there."""
    spec, n, q = _planted(ctx), ctx["n"], ctx["q"]
    out = []
    for u, v, a, phi in zip(spec["u"], spec["v"], spec["amplitude"], spec["phase"],
                            strict=True):
        value = a * complex(math.cos(phi), math.sin(phi))
        if ctx["inverse"]:
            out.append(((-int(u)) % n, (-int(v)) % q, value))
        else:
            out.append((int(u), int(v), value * n * q / (2 if ctx["real"] else 1)))
    return out


def _check_peaks(ctx: dict, result: dict, again: dict) -> str | None:
    bound = _noise_bound(ctx) + _cell_tolerance(ctx, again)
    reported = {(int(r), int(c)): complex(v) for r, c, v in
                zip(result["peak_rows"], result["peak_cols"], result["peak_values"],
                    strict=True)}
    planted = expected_peaks(ctx)
    for j, (u, v, value) in enumerate(planted):
        got = reported.get((u, v))
        if got is None:
            return (f"peak {j} (|X| {abs(value):.6g}) expected at ({u}, {v}) is not among the "
                    "spectrum's largest cells")
        if not abs(got - value) <= bound:
            return (f"peak {j} at ({u}, {v}): {got:.8g} reported, {value:.8g} planted (off by "
                    f"{abs(got - value):.3g}, bound {bound:.3g})")
    where = {(u, v) for u, v, _ in planted}
    for (r, c), got in reported.items():
        if (r, c) not in where and abs(got) > bound:
            return (f"a peak at ({r}, {c}) of |X| {abs(got):.6g} where no sinusoid was planted "
                    f"(noise bound {bound:.3g})")
    return None


# --------------------------------------------------------------------------- mutations


def _altered(raw: dict, change) -> dict:
    result = dict(raw["result"])
    for key in ("column_squares", "peak_rows", "peak_cols", "peak_values", "samples"):
        result[key] = np.array(result[key], copy=True)
    change(result)
    result["sum_of_squares"] = math.fsum(result["column_squares"].tolist())
    return {**raw, "result": result}


def _moved_peak(result: dict) -> None:
    top = int(np.argmax(np.abs(result["peak_values"])))
    result["peak_cols"][top] = (result["peak_cols"][top] + 1) % len(result["column_squares"])


def _scaled_block(result: dict) -> None:
    widths = result["col_chunks"]
    c0 = int(np.sum(widths[:-1]))  # the last column block of the spectrum
    result["column_squares"][c0:] *= 1.001**2
    result["peak_values"][result["peak_cols"] >= c0] *= 1.001


def _conjugated(result: dict) -> None:
    result["samples"] = np.conj(result["samples"])
    result["peak_values"] = np.conj(result["peak_values"])


def _transposed(result: dict) -> None:
    result["peak_rows"], result["peak_cols"] = (result["peak_cols"].copy(),
                                                result["peak_rows"].copy())


def _lost_column(result: dict) -> None:
    result["column_squares"][int(np.argmax(result["column_squares"]))] = 0.0


def _total_altered(raw: dict) -> dict:
    result = dict(raw["result"])
    result["sum_of_squares"] *= 1.01
    return {**raw, "result": result}


# What a failed check's detail names (regular expressions, see Mutation.names).
PEAK = r"peak 0 \(|reported peak [Xx]\["
PARSEVAL = r"Parseval's identity fails: the spectrum's sum of squares"
MUTATIONS = (
    Mutation("the largest peak moved by one column", lambda raw: _altered(raw, _moved_peak),
             PEAK),
    Mutation("the last column block scaled by 1.001", lambda raw: _altered(raw, _scaled_block),
             PARSEVAL),
    Mutation("the spectrum conjugated", lambda raw: _altered(raw, _conjugated),
             r"sampled cell X\[\d+, \d+\]: \S+ reported"),
    # in a spectrum that is not square (rfft2's half), a transposed peak may fall outside it
    Mutation("the peaks transposed", lambda raw: _altered(raw, _transposed),
             PEAK + r"|^a reported peak lies outside the spectrum"),
    Mutation("a column's squares lost", lambda raw: _altered(raw, _lost_column), PARSEVAL),
    Mutation("sum of squares altered", _total_altered,
             r"^sum of squares \S+ is not the total of its columns'"),
)
