"""What matmul-pipeline and its check (:mod:`pipelines.matmul.check`) both use.

The data's specification, not its computation: the seeds of the operands A and B derived from
the run's seed, the seed of the verification, the probes R (a column of ones, then
``PROBES`` columns of random signs, :meth:`~daskgpu.verification.Sampler.signs`), the sampled
cells of C, and :class:`MatmulContext`, what the check knows of a run. Nothing here multiplies
or sums a matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from daskgpu.verification import CONFIDENCE, Grid, Sampler, run_seed

# Sign probes of Freivalds' check: a row of C with an entry off by more than the rounding bound
# passes each with probability at most 1/2, so all of them with at most 1 - CONFIDENCE.
PROBES = math.ceil(-math.log2(1 - CONFIDENCE))
# Columns of R: the ones (C times it gives C's row sums), then the sign probes.
VECTORS = 1 + PROBES
# Cells of C the run reports and the check recomputes as dot products.
SAMPLED_CELLS = 16


def operand_seeds(seed: int) -> tuple[int, int]:
    """The seeds of A and of B: two 64-bit words of ``SeedSequence((seed, 1))``.

    Each operand's blocks then follow the per-block scheme of :mod:`daskgpu.data.synthetic`
    (``SeedSequence(operand_seed, spawn_key=(block_number,))``, row-major block order).
    """
    words = np.random.SeedSequence((seed, 1)).generate_state(2, np.uint64)
    return int(words[0]), int(words[1])


def check_seed(seed: int | None, shape: tuple[int, int, int]) -> int:
    """The seed of the probes and cells: the run's seed, or for inputs one from the shape."""
    return run_seed(seed, *shape)


def vectors(m: int, seed: int) -> np.ndarray:
    """The probes R, shaped (m, VECTORS), float64: a column of ones, then random signs."""
    return np.concatenate([np.ones((m, 1)), Sampler(seed, "probes").signs((m, PROBES))], axis=1)


def sampled_cells(n: int, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and columns of the cells of C the run reports and the check recomputes."""
    rng = Sampler(seed, "cells").generator()
    return (rng.integers(0, n, SAMPLED_CELLS, dtype=np.int64),
            rng.integers(0, m, SAMPLED_CELLS, dtype=np.int64))


@dataclass(frozen=True)
class MatmulContext:
    """What matmul-pipeline's check knows of a run.

    Attributes
    ----------
    a, b : Grid
        The blocks of A (n x k) and of B (k x m).
    dtype : str
        The product's element type.
    library : str
        The workers' array library ("numpy", "cupy").
    check_seed : int
        The seed of the probes and the sampled cells (:func:`check_seed`).
    seeds : tuple of int, optional
        The seeds of random A and B (:func:`operand_seeds`); None for inputs.
    inputs : tuple of (path, kind), optional
        Where A and B are read from: a file's path and "npy" or "zarr", an array in memory's
        label and "memory"; None for random data.
    sources : tuple of ArraySource, optional
        A and B as opened (:class:`~daskgpu.data.array_input.ArraySource`, an array in memory
        held), for the check to read again in the client; None for random data, and in the
        context a worker's task gets.
    """

    a: Grid
    b: Grid
    dtype: str
    library: str
    check_seed: int
    seeds: tuple[int, int] | None = None
    inputs: tuple[tuple[str, str], tuple[str, str]] | None = None
    sources: tuple | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """(n, k, m)."""
        (n, k), m = self.a.array_shape, self.b.array_shape[1]
        return n, k, m

    @property
    def c(self) -> Grid:
        """The blocks of C: A's rows by B's columns."""
        return Grid((self.a.chunks[0], self.b.chunks[1]))

    def cells(self) -> tuple[np.ndarray, np.ndarray]:
        """Rows and columns of the sampled cells of C."""
        n, _, m = self.shape
        return sampled_cells(n, m, self.check_seed)
