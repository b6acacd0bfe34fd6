"""Numeric helpers that pipelines and their checks share.

Seeded generators of NumPy or CuPy from a :class:`numpy.random.SeedSequence`, the first index of
every block, rows of every shard, and the unit roundoff of a floating-point type. Each is
small and documented as a scheme, so that a check may follow the same scheme as the run it
checks without sharing the run's computation.

Random numbers on the device
----------------------------
On the host, :func:`generator` is NumPy's ``default_rng`` (PCG64) of the sequence. On the device
it is a :class:`CounterGenerator`, not CuPy's ``default_rng``, for two reasons. CuPy's cuRAND
generators keep 32 bits of a seed (``generate_state(1, uint32)[0]``), so among 100,000 blocks
two are likely drawn alike; and they draw element ``i`` of a call from state ``i mod S`` of
``S`` parallel states, so a block drawn in pieces equals the block drawn whole only where ``S``
divides the piece size, which no CuPy documentation promises.

The scheme, which any library with unsigned 64-bit arithmetic can follow:

- the key is the sequence's first two 64-bit words, ``k = generate_state(2, uint64)``
  (its first word is :func:`seed_word`);
- the generator is one stream of 64-bit words; word ``j`` is word ``j mod 4`` of
  Philox4x64-10 (Salmon et al., 2011; NumPy's ``Philox`` bit generator) of the counter
  ``(j // 4, 0, 0, 0)`` under the key ``k``. Each draw takes the next words of the stream, so
  drawing ``a`` values and then ``b`` gives exactly the ``a + b`` values of one draw: pieces
  equal the whole by construction, and element ``i`` depends only on ``(k, i)``;
- ``random`` takes one word a value: ``(w >> 11) * 2**-53`` for float64, ``(w >> 40) * 2**-24``
  for float32; ``uniform(low, high)`` is ``low + (high - low) * random`` in float64;
- ``standard_normal`` takes two words ``w0, w1`` a value: ``sqrt(-2 ln u1) * cos(2 pi u2)`` in
  float64 (Box-Muller), ``u1 = ((w0 >> 11) + 1) * 2**-53`` in (0, 1] and
  ``u2 = (w1 >> 11) * 2**-53``, then rounded to the dtype;
- ``integers(low, high)`` takes one word a value: ``low + (((w >> 32) * (high - low)) >> 32)``,
  for ``high - low <= 2**32`` (bias below ``(high - low) / 2**32``).
"""

from __future__ import annotations

import importlib
import math

import numpy as np


def seed_word(sequence: np.random.SeedSequence) -> int:
    """The first 64-bit word of ``sequence``: the integer seed of a generator that takes one.

    >>> seed_word(np.random.SeedSequence(0)) == seed_word(np.random.SeedSequence(0))
    True
    """
    return int(sequence.generate_state(1, np.uint64)[0])


def generator(library: str, sequence: np.random.SeedSequence):
    """A seeded generator of ``library``: NumPy's ``default_rng``, or a :class:`CounterGenerator`.

    Parameters
    ----------
    library : str
        ``"numpy"``, or an array library with NumPy's unsigned 64-bit array arithmetic
        (``"cupy"``).
    sequence : numpy.random.SeedSequence
        The seed. NumPy's generator takes the sequence itself; the device's its first two
        64-bit words (see the module docstring).

    Returns
    -------
    numpy.random.Generator or CounterGenerator
        Draws arrays of ``library``.
    """
    if library == "numpy":
        return np.random.default_rng(sequence)
    return CounterGenerator(importlib.import_module(library), sequence)


_PHILOX_MULTIPLIERS = (0xD2E7470EE14C6C93, 0xCA5A826395121157)
_PHILOX_WEYL = (0x9E3779B97F4A7C15, 0xBB67AE8584CAA73B)
_PHILOX_ROUNDS = 10
_LOW_32 = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)
_WORDS_PER_COUNTER = 4
#: Words drawn at once: bounds the temporaries of one draw to a few tens of MiB.
PIECE_WORDS = 2**21


def _high_and_low(a, multiplier: int):
    """The high and low 64-bit halves of ``a * multiplier`` (uint64 arrays, exact)."""
    m_low, m_high = np.uint64(multiplier & 0xFFFFFFFF), np.uint64(multiplier >> 32)
    a_low, a_high = a & _LOW_32, a >> _32
    cross = a_high * m_low + ((a_low * m_low) >> _32)
    other = a_low * m_high + (cross & _LOW_32)
    high = a_high * m_high + (cross >> _32) + (other >> _32)
    return high, a * np.uint64(multiplier)


def philox4x64(counter, key: tuple[int, int]):
    """Philox4x64-10 of the counters ``(counter, 0, 0, 0)`` under ``key``: four uint64 arrays.

    ``counter`` is a uint64 array of any library with NumPy's operators; ``key`` two 64-bit
    integers. The same function as NumPy's ``Philox`` bit generator.
    """
    x0, x1 = counter, counter * np.uint64(0)
    x2, x3 = x1, x1
    k0, k1 = key
    for step in range(_PHILOX_ROUNDS):
        if step:
            k0 = (k0 + _PHILOX_WEYL[0]) % 2**64
            k1 = (k1 + _PHILOX_WEYL[1]) % 2**64
        high0, low0 = _high_and_low(x0, _PHILOX_MULTIPLIERS[0])
        high1, low1 = _high_and_low(x2, _PHILOX_MULTIPLIERS[1])
        x0, x1, x2, x3 = high1 ^ x1 ^ np.uint64(k0), low1, high0 ^ x3 ^ np.uint64(k1), low0
    return x0, x1, x2, x3


def counter_words(xp, key: tuple[int, int], first: int, count: int):
    """Words ``first`` to ``first + count`` of the stream of ``key`` (module docstring).

    With CuPy, one fused kernel of the same function (:func:`_fused_words`) where it gives
    the array operations' words; else the array operations of :func:`philox4x64`.
    """
    kernel = _fused_words(xp)
    if kernel is not None:
        out = xp.empty(count, dtype=np.uint64)
        kernel(np.uint64(first), np.uint64(key[0]), np.uint64(key[1]), out)
        return out
    return _array_words(xp, key, first, count)


def _array_words(xp, key: tuple[int, int], first: int, count: int):
    lead = first % _WORDS_PER_COUNTER
    counters = xp.arange(first // _WORDS_PER_COUNTER,
                         (first + count + _WORDS_PER_COUNTER - 1) // _WORDS_PER_COUNTER,
                         dtype=np.uint64)
    words = xp.stack(philox4x64(counters, key), axis=1).reshape(-1)
    return words[lead:lead + count]


_FUSED_SOURCE = """
unsigned long long j = first + i;
unsigned long long x0 = j >> 2, x1 = 0, x2 = 0, x3 = 0, k0 = key0, k1 = key1;
for (int step = 0; step < 10; ++step) {
    if (step) { k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL; }
    unsigned long long high0 = __umul64hi(0xD2E7470EE14C6C93ULL, x0);
    unsigned long long low0 = 0xD2E7470EE14C6C93ULL * x0;
    unsigned long long high1 = __umul64hi(0xCA5A826395121157ULL, x2);
    unsigned long long low1 = 0xCA5A826395121157ULL * x2;
    x0 = high1 ^ x1 ^ k0; x1 = low1; x2 = high0 ^ x3 ^ k1; x3 = low0;
}
int lane = (int)(j & 3);
w = lane == 0 ? x0 : lane == 1 ? x1 : lane == 2 ? x2 : x3;
"""
#: Library module -> its fused kernel, or None where it has none or its words were wrong.
_FUSED: dict = {}


def _fused_words(xp):
    """CuPy's ``ElementwiseKernel`` of Philox4x64-10's words, or None.

    Made once a process, and used only if its words for a probe (a key, words from 2**40 - 3)
    are those of the array operations; else a warning, and the array operations.
    """
    name = getattr(xp, "__name__", "")
    if xp not in _FUSED:
        _FUSED[xp] = None
        if hasattr(xp, "ElementwiseKernel"):
            import warnings

            key, first, count = (0x243F6A8885A308D3, 0x13198A2E03707344), 2**40 - 3, 4099
            try:
                kernel = xp.ElementwiseKernel("uint64 first, uint64 key0, uint64 key1",
                                              "uint64 w", _FUSED_SOURCE, "daskgpu_philox4x64")
                out = xp.empty(count, dtype=np.uint64)
                kernel(np.uint64(first), np.uint64(key[0]), np.uint64(key[1]), out)
                agrees = bool((out == _array_words(xp, key, first, count)).all())
            except Exception as error:  # noqa: BLE001 - any failure means: not this kernel
                agrees, why = False, f"{type(error).__name__}: {error}"
            else:
                why = "its words differ from the array operations'"
            if agrees:
                _FUSED[xp] = kernel
            else:
                warnings.warn(f"{name}: the fused random-number kernel is not used ({why}); "
                              "the same numbers come from array operations, more slowly",
                              RuntimeWarning, stacklevel=3)
    return _FUSED[xp]


class CounterGenerator:
    """A counter-based generator of any array library: the device's scheme (module docstring).

    Parameters
    ----------
    xp : module
        The array library (``numpy``, ``cupy``).
    sequence : numpy.random.SeedSequence
        Keyed by its first two 64-bit words.

    Attributes
    ----------
    key : tuple of int
        The two 64-bit key words.
    position : int
        Words of the stream drawn so far; :meth:`advance` moves it.
    """

    def __init__(self, xp, sequence: np.random.SeedSequence):
        self._xp = xp
        self.key = tuple(int(word) for word in sequence.generate_state(2, np.uint64))
        self.position = 0

    def advance(self, words: int) -> None:
        """Skip ``words`` words of the stream."""
        self.position += int(words)

    def _fill(self, size, dtype, out, words_per_value: int, convert):
        """``out`` (or a new array of ``size``), filled piece by piece from the stream."""
        if out is None:
            out = self._xp.empty(() if size is None else size, dtype=dtype)
        flat = out.reshape(-1)
        step = max(1, PIECE_WORDS // words_per_value)
        for start in range(0, flat.size, step):
            count = min(step, flat.size - start)
            words = counter_words(self._xp, self.key, self.position, count * words_per_value)
            self.position += count * words_per_value
            flat[start:start + count] = convert(words)
        return out

    def random(self, size=None, dtype=np.float64, out=None):
        """Uniform values on [0, 1): one word each (53 bits for float64, 24 for float32)."""
        dtype = np.dtype(out.dtype if out is not None else dtype)
        if dtype == np.float32:
            def convert(w):
                return (w >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
        elif dtype == np.float64:
            def convert(w):
                return (w >> np.uint64(11)).astype(np.float64) * 2.0**-53
        else:
            raise TypeError(f"random draws float32 or float64, not {dtype}")
        return self._fill(size, dtype, out, 1, convert)

    def standard_normal(self, size=None, dtype=np.float64, out=None):
        """Standard normal values: Box-Muller of two words each, in float64."""
        dtype = np.dtype(out.dtype if out is not None else dtype)
        xp = self._xp

        def convert(w):
            u1 = ((w[0::2] >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
            u2 = (w[1::2] >> np.uint64(11)).astype(np.float64) * 2.0**-53
            return (xp.sqrt(-2.0 * xp.log(u1)) * xp.cos((2 * math.pi) * u2)).astype(dtype)
        return self._fill(size, dtype, out, 2, convert)

    def normal(self, loc=0.0, scale=1.0, size=None):
        """Normal values in float64: ``loc + scale * standard_normal``."""
        return loc + scale * self.standard_normal(size)

    def uniform(self, low=0.0, high=1.0, size=None):
        """Uniform values on [low, high) in float64: ``low + (high - low) * random``."""
        return low + (high - low) * self.random(size)

    def integers(self, low, high=None, size=None, dtype=np.int64):
        """Integers in [low, high) (``high - low <= 2**32``): one word each."""
        if high is None:
            low, high = 0, low
        span = int(high) - int(low)
        if not 0 < span <= 2**32:
            raise ValueError(f"integers draws from 1 to 2**32 values, not {span}")

        def convert(w):
            return (((w >> _32) * np.uint64(span)) >> _32).astype(np.int64) + int(low)
        return self._fill(size, np.dtype(dtype), None, 1, convert)


def starts(sizes) -> np.ndarray:
    """The first index of every block along an axis, from the blocks' sizes.

    >>> starts((4, 4, 2)).tolist()
    [0, 4, 8]
    """
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def shard_sizes(rows: int, per_shard: int) -> tuple[int, ...]:
    """Rows of each shard: ``per_shard`` each, the last one the rest.

    >>> shard_sizes(10, 4)
    (4, 4, 2)
    """
    full, rest = divmod(rows, per_shard)
    return (per_shard,) * full + ((rest,) if rest else ())


def unit_roundoff(dtype) -> float:
    """Unit roundoff u = eps / 2 of a floating-point type: the largest error of one rounding.

    2**-24 for float32, 2**-53 for float64, relative to the rounded value.

    >>> unit_roundoff("float64") == 2.0**-53
    True
    """
    return float(np.finfo(np.dtype(dtype)).eps) / 2
