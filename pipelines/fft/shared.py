"""What fft-pipeline and its check (:mod:`pipelines.fft.check`) both use.

The check's context (:class:`FFTContext`), and the data's specification, not its computation:
the planted sinusoids (integer frequencies, amplitudes and phases drawn from the run's seed),
the noise scheme, the cells of the spectrum the run reports and the check recomputes, the
spectrum's shape, and the seeded projection the run certifies its transform with
(:func:`projection_weights`, and their transform in closed form, :func:`projection_transform`).
Nothing here transforms or sums the data.

Generated data, element ``(r, c)`` of the n x q input (n rows, q columns)::

    complex:  sum_j A_j exp(i phi_j) exp(2 pi i (u_j r / n + v_j c / q))  + noise
    real:     sum_j A_j cos(2 pi (u_j r / n + v_j c / q) + phi_j)          + noise

Noise: row block ``i`` (blocks of the run's chunking) draws from
``SeedSequence(noise_seed, spawn_key=(i,))`` (NumPy's ``default_rng``, or the array library's
seeded with the sequence's first 64-bit word) one array of uniform [0, 1) float64 values,
shaped (rows, q) for real data and (rows, q, 2) for complex data (real and imaginary parts
side by side), each mapped to ``NOISE * (2 x - 1)``. The sum is made in float64 and rounded
once to the data's type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.toolkit.numeric import seed_word, starts
from daskgpu.verification import Sampler, run_seed

# Planted sinusoids (fewer where the array is too small to hold them apart).
PEAKS = 4
# Noise: uniform on [-NOISE, NOISE) in each real component.
NOISE = 0.01
# The largest cells of each block of the spectrum that the run reports.
TOP = PEAKS + 2
# Cells of the spectrum the run reports and the check recomputes as DFT sums: one in every
# column block of the spectrum, and this many more anywhere.
EXTRA_CELLS = 8

COMPLEX_OF = {"float32": "complex64", "float64": "complex128",
              "complex64": "complex64", "complex128": "complex128"}
REAL_OF = {"complex64": "float32", "complex128": "float64"}


def spectrum_columns(q: int, real: bool) -> int:
    """Columns of the spectrum of an input of q columns: q, or q // 2 + 1 for rfft2."""
    return q // 2 + 1 if real else q


def signal(seed: int, n: int, real: bool, q: int | None = None) -> dict:
    """The planted sinusoids of an n x q input (q: n where not given).

    Integer frequencies ``u``, ``v``, amplitudes and phases. Frequencies are distinct cells of
    the spectrum. For real data ``v`` lies in ``[1, (q - 1) // 2]``, so each cosine shows as
    one peak in rfft2's half spectrum (its mirror image lies in the half left out).
    """
    q = n if q is None else q
    rng = np.random.default_rng(np.random.SeedSequence((seed, 11)))
    cols = np.arange(1, (q - 1) // 2 + 1) if real else np.arange(q)
    cells = len(cols) * n
    count = min(PEAKS, cells)
    if count:
        picked = rng.choice(cells, size=count, replace=False)
        u, v = picked // len(cols), cols[picked % len(cols)]
    else:
        u = v = np.zeros(0, np.int64)
    amplitudes = np.sort(rng.uniform(0.5, 1.5, count))[::-1].copy()
    phases = rng.uniform(0.0, 2 * math.pi, count)
    return {"u": np.asarray(u, np.int64), "v": np.asarray(v, np.int64),
            "amplitude": amplitudes, "phase": phases}


def noise_seed(seed: int) -> int:
    """The seed of the noise: a 64-bit word of ``SeedSequence((seed, 12))``."""
    return seed_word(np.random.SeedSequence((seed, 12)))


def noise_sigma(real: bool) -> float:
    """Standard deviation of one element's noise (both components for complex data)."""
    per_component = NOISE**2 / 3  # variance of uniform [-NOISE, NOISE)
    return math.sqrt(per_component if real else 2 * per_component)


def check_seed(seed: int | None, n: int) -> int:
    """The seed of the sampled cells: the run's, or for inputs one from the size."""
    return run_seed(seed, n)


def sampled_cells(n: int, col_chunks: tuple[int, ...], seed: int) -> tuple[np.ndarray,
                                                                              np.ndarray]:
    """Rows and columns of the sampled cells: one per column block, then ``EXTRA_CELLS``."""
    rng = Sampler(seed, "cells").generator()
    m = int(sum(col_chunks))
    first = starts(col_chunks)
    cols = np.concatenate([first + rng.integers(0, np.asarray(col_chunks)),
                           rng.integers(0, m, EXTRA_CELLS)])
    rows = rng.integers(0, n, len(cols))
    return rows.astype(np.int64), cols.astype(np.int64)


def column_weights(q: int, m: int, real: bool) -> np.ndarray:
    """How often each column of the spectrum counts in the full spectrum's sum of squares.

    1 everywhere for a full spectrum; for rfft2's half of an input of q columns, columns
    1 .. (q - 1) // 2 stand for their mirror images too (2), column 0 and, for even q, column
    q / 2 for themselves (1).
    """
    weights = np.ones(m)
    if real:
        weights[1:(q - 1) // 2 + 1] = 2.0
    return weights


def _projection(seed: int, n: int) -> tuple[int, float]:
    """The projection's frequency, as the odd integer k of theta = pi k / n, and its phase.

    theta lies halfway between two of the DFT's frequencies, where no transform of a projected
    row cancels, and its closed form (:func:`projection_transform`) never divides by zero.
    """
    rng = Sampler(seed, "projection").generator()
    return 2 * int(rng.integers(0, max(n, 1))) + 1, float(rng.uniform(0.0, 2 * math.pi))


def projection_weights(n: int, m: int, seed: int) -> np.ndarray:
    """The weights s_v = cos(theta v + phi), v < m, of the certified projection X s.

    ``n`` here, and in :func:`projection_transform`, is the length of the transforms along
    the input's rows (its columns, q), ``m`` the spectrum's columns.

    The run reports the spectrum's rows weighted by them (``X @ s``, one value a row) and the
    input's rows weighted by :func:`projection_transform` (``x @ b``), so that
    ``X s = W x (W s)`` (W the DFT matrix) can be checked without a transform.
    """
    k, phi = _projection(seed, n)
    v = np.arange(m, dtype=np.int64)
    return np.cos(math.pi * ((k * v) % (2 * n)) / n + phi)


def _sine_of_turns(k: np.ndarray, n: int) -> np.ndarray:
    """sin(pi k / (2 n)) for integers k, accurate near its zeros as well.

    The angle is reduced in integers to within a quarter turn of 0 (sin(x + pi) = -sin x,
    sin(pi - x) = sin x), so that a small sine comes from a small, exact numerator.
    """
    r = np.asarray(k, np.int64) % (4 * n)
    sign = np.where(r >= 2 * n, -1.0, 1.0)
    r = r % (2 * n)
    r = np.where(r > n, 2 * n - r, r)
    return sign * np.sin(math.pi * r / (2 * n))


def _geometric(k: np.ndarray, n: int, m: int) -> np.ndarray:
    """sum_{v < m} exp(i gamma v) for gamma = pi k / n, odd integers k.

    The sum of a geometric series, e^(i (m-1) gamma/2) sin(m gamma/2) / sin(gamma/2), with every
    angle an integer multiple of pi / (2n) reduced in integers first: as exact at any n. An odd
    k is never a multiple of 2n, so sin(gamma/2) is never 0.
    """
    k = np.asarray(k, np.int64) % (4 * n)
    turn = math.pi * (((m - 1) * k) % (4 * n)) / (2 * n)
    return np.exp(1j * turn) * (_sine_of_turns(m * k, n) / _sine_of_turns(k, n))


def projection_transform(n: int, m: int, seed: int, inverse: bool) -> np.ndarray:
    """The transform b = W s in closed form: b_c = sum_{v < m} s_v exp(-+2 pi i c v / n).

    ``-`` for the forward transform, ``+`` for the inverse (the inverse's 1/n^2 is not in b).
    With s_v = (e^(i(theta v + phi)) + e^(-i(theta v + phi))) / 2, each half is a geometric
    series of ratio e^(i pi (+-k + 2 sign c) / n); no transform, and O(n).
    """
    k, phi = _projection(seed, n)
    sign = 1 if inverse else -1
    c = np.arange(n, dtype=np.int64)
    return 0.5 * (np.exp(1j * phi) * _geometric(k + 2 * sign * c, n, m)
                  + np.exp(-1j * phi) * _geometric(-k + 2 * sign * c, n, m))


@dataclass(frozen=True)
class FFTContext:
    """What fft-pipeline's check knows of a run.

    irfft2 is seen as the inverse of a complex input with a real result, seen transposed: its
    input held as rows of the half spectrum's columns, its result's columns as rows.

    Attributes
    ----------
    n, q, m : int
        The spectrum's rows (the transforms' length down), the input's columns (the length of
        a row's transform), the spectrum's columns.
    real : bool
        Whether the input holds real values (rfft2).
    half_inverse, inverse : bool
        irfft2; an inverse transform (ifft2, irfft2).
    dtype : str
        The transform's complex type.
    seed : int, optional
        Generated data's seed (None for an input).
    row_chunks, col_chunks : tuple of int
        The input's row blocks; the spectrum's column blocks.
    library : str
        The workers' array library.
    source : ArraySource, optional
        The input (``path``, ``kind``), or None for generated data.
    """

    n: int
    q: int
    m: int
    real: bool
    half_inverse: bool
    inverse: bool
    dtype: str
    seed: int | None
    row_chunks: tuple[int, ...]
    col_chunks: tuple[int, ...]
    library: str = "numpy"
    source: Any = None

    @property
    def check_seed(self) -> int:
        """The seed of the check's and the certificates' choices (:func:`check_seed`)."""
        return check_seed(self.seed, self.n)

    @property
    def points(self) -> int:
        """Points of the transform, N = n q."""
        return self.n * self.q

    @property
    def scale(self) -> float:
        """The full spectrum's sum of |X|^2 per unit of the input's sum of |x|^2 (Parseval)."""
        return 1.0 / self.points if self.inverse else float(self.points)

    @property
    def rows(self) -> int:
        """Rows of the input as it is held."""
        return int(sum(self.row_chunks))

    @property
    def value_type(self) -> str:
        """The input's element type in the run: real for rfft2, the complex type otherwise."""
        return REAL_OF[self.dtype] if self.real else self.dtype

    def cells(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of the sampled cells of the spectrum (:func:`sampled_cells`)."""
        return sampled_cells(self.n, self.col_chunks, self.check_seed)

    def planted(self) -> dict:
        """The planted sinusoids of generated data (:func:`signal`)."""
        return signal(self.seed, self.n, self.real, self.q)

    def row_weights(self) -> np.ndarray:
        """How much each input row counts in the result: 1, or 2 for irfft2's mirrored ones.

        irfft2's input rows are the half spectrum's columns; those standing for their mirror
        images count twice (:func:`column_weights`).
        """
        if self.half_inverse:
            return column_weights(self.n, self.rows, True)
        return np.ones(self.rows)
