"""Which parts of a run a check recomputes, and the geometry it finds them by.

- :class:`Plan`: the parts checked at a depth: every one at ``full``, at ``fast`` a seeded
  sample as large as :func:`~daskgpu.verification.sampling.sample_size` asks (plus any parts
  always checked, such as the last block or the first iteration), and what that establishes.
- :class:`Grid`: the blocks of a chunked array: numbers in row-major order, locations, shapes,
  the region of the array each covers.
- :class:`Cells`: parts cut into cells, numbered part by part: a cell's part and its index in it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from daskgpu.verification.sampling import (
    CONFIDENCE,
    FRACTION,
    Sampler,
    detection,
    sample_size,
)


@dataclass(frozen=True)
class Plan:
    """The parts of a run a check recomputes, and what checking them establishes.

    Attributes
    ----------
    population : int
        How many parts the run computed.
    parts : tuple of int
        The parts checked, sorted: the sample and the parts always checked.
    sampled : int
        How many of them the seeded sample drew (what :attr:`promise` is stated for).
    unit : str
        What a part is, plural ("blocks", "cells", "steps").
    fraction : float
        The share of wrong parts the promise is stated for.
    """

    population: int
    parts: tuple[int, ...]
    sampled: int
    unit: str = "blocks"
    fraction: float = FRACTION

    @classmethod
    def at(cls, depth: str, population: int, sampler: Sampler, *, unit: str = "blocks",
           always: Iterable[int] = (), key: tuple[int, ...] = (), fraction: float = FRACTION,
           confidence: float = CONFIDENCE) -> Plan:
        """The plan of a check at ``depth``: all parts at ``full``, a seeded sample at ``fast``.

        Parameters
        ----------
        depth : {"fast", "full"}
            The check's depth.
        population : int
            How many parts the run computed.
        sampler : Sampler
            Draws the sample (its purpose keeps it apart from the check's other samples).
        unit : str
            What a part is, plural.
        always : iterable of int
            Parts checked whatever the sample (the last block, the first iteration): they add
            to the sample, never take its place.
        key : tuple of int
            The sampler's stream, where one check draws several samples.
        fraction, confidence : float
            A fault in at least ``fraction`` of the parts is caught with probability at least
            ``confidence`` (see :func:`~daskgpu.verification.sampling.sample_size`).

        >>> plan = Plan.at("fast", 100, Sampler(3, "blocks"), always=[99])
        >>> len(plan.parts) < 100 and 99 in plan
        True
        >>> Plan.at("full", 5, Sampler(3)).parts
        (0, 1, 2, 3, 4)
        """
        if depth == "full":
            return cls(population, tuple(range(population)), population, unit, fraction)
        drawn = sampler.choose(population, sample_size(population, fraction, confidence), *key)
        extra = {int(p) for p in always if 0 <= int(p) < population}
        parts = tuple(sorted({int(p) for p in drawn} | extra))
        return cls(population, parts, len(drawn), unit, fraction)

    @classmethod
    def every(cls, population: int, unit: str = "blocks") -> Plan:
        """The plan that checks every part (a full audit, or a check cheap enough for all)."""
        return cls(population, tuple(range(population)), population, unit)

    @property
    def complete(self) -> bool:
        """Whether every part is checked."""
        return len(self.parts) >= self.population

    @property
    def promise(self) -> str:
        """What the plan establishes, in words (for the verification's detail)."""
        if self.complete:
            return f"all {self.population} {self.unit} checked again"
        return detection(self.sampled, self.population, self.unit, self.fraction)

    def single_part(self) -> float:
        """The probability that a fault confined to one part is among those checked."""
        return 1.0 if self.complete else self.sampled / self.population

    def __iter__(self) -> Iterator[int]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)

    def __contains__(self, part: object) -> bool:
        return part in set(self.parts)


@dataclass(frozen=True)
class Grid:
    """The blocks of a chunked array, numbered in row-major order.

    Parameters
    ----------
    chunks : tuple of tuple of int
        The block sizes along every axis, as :func:`dask.array.core.normalize_chunks` gives
        (a Dask array's ``chunks``).

    >>> grid = Grid(((2, 2, 1), (3, 3)))
    >>> grid.shape, grid.blocks, grid.location(3), grid.block_shape(5)
    ((3, 2), 6, (1, 1), (1, 3))
    >>> grid.region(5)
    (slice(4, 5, None), slice(3, 6, None))
    """

    chunks: tuple[tuple[int, ...], ...]

    def __post_init__(self):
        object.__setattr__(self, "chunks", tuple(tuple(int(s) for s in c) for c in self.chunks))

    @property
    def shape(self) -> tuple[int, ...]:
        """Blocks along each axis."""
        return tuple(len(sizes) for sizes in self.chunks)

    @property
    def blocks(self) -> int:
        """How many blocks there are."""
        return math.prod(self.shape)

    @property
    def array_shape(self) -> tuple[int, ...]:
        """The shape of the whole array."""
        return tuple(sum(sizes) for sizes in self.chunks)

    def location(self, number: int) -> tuple[int, ...]:
        """The grid location of block ``number``."""
        return tuple(int(i) for i in np.unravel_index(int(number), self.shape))

    def number(self, location) -> int:
        """The number of the block at grid ``location``."""
        return int(np.ravel_multi_index(tuple(location), self.shape)) if self.shape else 0

    def locations(self) -> Iterator[tuple[int, ...]]:
        """Every block's location, in number order."""
        return iter(np.ndindex(*self.shape))

    def _at(self, block) -> tuple[int, ...]:
        return self.location(block) if isinstance(block, int | np.integer) else tuple(block)

    def block_shape(self, block) -> tuple[int, ...]:
        """The shape of ``block`` (a number or a location)."""
        where = self._at(block)
        return tuple(sizes[i] for sizes, i in zip(self.chunks, where, strict=True))

    def block_size(self, block) -> int:
        """How many elements ``block`` holds."""
        return math.prod(self.block_shape(block))

    def region(self, block) -> tuple[slice, ...]:
        """The slices of the whole array that ``block`` (a number or a location) covers."""
        where = self._at(block)
        firsts = (sum(sizes[:i]) for sizes, i in zip(self.chunks, where, strict=True))
        return tuple(slice(first, first + size)
                     for first, size in zip(firsts, self.block_shape(where), strict=True))

    def counts(self) -> np.ndarray:
        """Elements of every block (int64), shaped as the grid."""
        counts = np.ones((), dtype=np.int64)
        for sizes in self.chunks:
            counts = np.multiply.outer(counts, np.asarray(sizes, dtype=np.int64))
        return counts


@dataclass(frozen=True)
class Cells:
    """Parts (blocks, shards, partitions) cut into cells, numbered part by part.

    Parameters
    ----------
    per_part : tuple of int
        How many cells each part has, in part order.

    >>> cells = Cells((2, 3))
    >>> cells.total, cells.locate(3), list(cells.of(1))
    (5, (1, 1), [2, 3, 4])
    """

    per_part: tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "per_part", tuple(int(n) for n in self.per_part))

    @property
    def firsts(self) -> np.ndarray:
        """The number of each part's first cell, and the total last (int64)."""
        return np.concatenate([[0], np.cumsum(self.per_part, dtype=np.int64)]).astype(np.int64)

    @property
    def total(self) -> int:
        """How many cells there are."""
        return int(sum(self.per_part))

    def locate(self, cell: int) -> tuple[int, int]:
        """``(part, index within the part)`` of ``cell``."""
        firsts = self.firsts
        part = int(np.searchsorted(firsts, int(cell), side="right")) - 1
        return part, int(cell) - int(firsts[part])

    def of(self, part: int) -> range:
        """The numbers of ``part``'s cells."""
        first = int(self.firsts[part])
        return range(first, first + self.per_part[part])

    def owners(self) -> np.ndarray:
        """The part of every cell (int64), in cell order."""
        return np.repeat(np.arange(len(self.per_part), dtype=np.int64), self.per_part)
