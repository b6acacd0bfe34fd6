"""The device's random numbers (daskgpu.toolkit.numeric's counter-based generator), driven on
the strict CuPy stand-in, whose own ``cupy.random.default_rng`` has CuPy's state layout: a seed
cut to 32 bits, element ``i`` of a draw from state ``i mod S``. Drawing with CuPy's generator, as
the library once did, fails these tests."""

import sys

import numpy as np
import pytest

from daskgpu.data import synthetic
from daskgpu.toolkit import numeric
from daskgpu.toolkit.numeric import CounterGenerator, generator, philox4x64, seed_word
from pipelines.mean.check import redrawn_sums

# Blocks 1379 and 28496 of seed 0: CuPy keeps 32 bits of the seed it is given, and these two
# blocks' seeds (their sequences' first 64-bit words) are cut to the same 32 bits.
SEED, BLOCKS = 0, (1379, 28496)


def _sequence(block: int, seed: int = SEED) -> np.random.SeedSequence:
    return np.random.SeedSequence(seed, spawn_key=(block,))


def _cut_to_32_bits(sequence: np.random.SeedSequence) -> int:
    """What CuPy's cuRAND generators keep of ``default_rng(seed_word(sequence))``."""
    return int(np.random.SeedSequence(seed_word(sequence)).generate_state(1, np.uint32)[0])


def _block_info(location, grid, shape):
    return {None: {"chunk-location": location, "num-chunks": grid, "chunk-shape": shape}}


def test_the_stream_is_numpys_philox_keyed_by_two_words_of_the_sequence():
    """The documented scheme, followed by NumPy's own Philox (C code shared with nothing
    here): word j is Philox4x64-10 of counter j // 4, key generate_state(2, uint64)."""
    sequence = _sequence(7)
    key = sequence.generate_state(2, np.uint64)
    # NumPy's Philox increments its counter before each block: start it at -1 to begin at 0.
    reference = np.random.Philox(key=key, counter=np.full(4, 2**64 - 1, dtype=np.uint64))
    words = reference.random_raw(4 * 300 + 3)
    drawn = CounterGenerator(np, sequence)
    assert drawn.key == tuple(int(k) for k in key) and drawn.key[0] == seed_word(sequence)
    np.testing.assert_array_equal(drawn.random(1203), (words >> np.uint64(11)) * 2.0**-53)
    np.testing.assert_array_equal(
        drawn.random(10, dtype=np.float32),
        (reference.random_raw(10) >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24))
    far = np.array([2**40 + 5], dtype=np.uint64)
    probe = np.random.Philox(key=key, counter=np.array([2**40 + 4, 0, 0, 0], dtype=np.uint64))
    assert [int(w[0]) for w in philox4x64(far, tuple(int(k) for k in key))] == \
        probe.random_raw(4).tolist()


def test_two_blocks_whose_32_bit_seeds_collide_still_differ(cupy_stand_in):
    first, second = (_sequence(b) for b in BLOCKS)
    assert seed_word(first) != seed_word(second)
    assert _cut_to_32_bits(first) == _cut_to_32_bits(second)  # CuPy would draw them alike
    cupy_rng = cupy_stand_in.random.default_rng
    assert (cupy_rng(seed_word(first)).random(64).get()
            == cupy_rng(seed_word(second)).random(64).get()).all()

    a, b = (generator("cupy", s).random(64) for s in (first, second))
    assert isinstance(a, cupy_stand_in.ndarray)
    assert not (a.get() == b.get()).any()
    # The same blocks of a random array (a grid of 40,000 blocks, in row-major order).
    grid = (200, 200)
    blocks = [synthetic._random_block(_block_info(np.unravel_index(b, grid), grid, (4, 4)),
                                      seed=SEED, library="cupy", distribution=kind)
              for kind in ("uniform", "normal") for b in BLOCKS]
    assert not (blocks[0].get() == blocks[1].get()).any()
    assert not (blocks[2].get() == blocks[3].get()).any()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pieces_equal_the_whole_by_construction(cupy_stand_in, dtype):
    """A block drawn in pieces of any size is the block drawn whole, element for element;
    CuPy's generator (state i mod S) gives that only where S divides the piece size."""
    states = cupy_stand_in.generator_states
    size, piece = 3 * states + 123, states + 1000
    whole = generator("cupy", _sequence(3)).random(size, dtype=dtype).get()
    rng = generator("cupy", _sequence(3))
    out = cupy_stand_in.empty(size, dtype=dtype)
    for start in range(0, size, piece):
        rng.random(out=out[start:start + piece])
    np.testing.assert_array_equal(out.get(), whole)

    normal = generator("cupy", _sequence(3)).standard_normal(size, dtype=dtype).get()
    rng = generator("cupy", _sequence(3))
    pieces = [rng.standard_normal(min(piece, size - s), dtype=dtype).get()
              for s in range(0, size, piece)]
    np.testing.assert_array_equal(np.concatenate(pieces), normal)

    cupy = cupy_stand_in.random.default_rng(11)  # what the library no longer draws with
    cut = np.concatenate([cupy.random(min(piece, size - s), dtype=dtype).get()
                          for s in range(0, size, piece)])
    assert not (cut == cupy_stand_in.random.default_rng(11).random(size, dtype=dtype).get()).all()


def test_an_element_depends_only_on_the_key_and_its_place(cupy_stand_in):
    whole = generator("cupy", _sequence(5)).random(1000).get()
    rng = generator("cupy", _sequence(5))
    rng.advance(637)
    np.testing.assert_array_equal(rng.random(100).get(), whole[637:737])
    normal = generator("cupy", _sequence(5)).standard_normal(50).get()
    rng = generator("cupy", _sequence(5))
    rng.advance(2 * 20)  # two words a normal value
    np.testing.assert_array_equal(rng.standard_normal(30).get(), normal[20:])


def test_a_block_summed_in_pieces_is_the_check_s_block_drawn_whole(cupy_stand_in):
    """mean-pipeline's device path: the run sums a block in pieces of ``stream_elements``
    (here not a multiple of CuPy's states), its check draws the block whole."""
    shape, grid = (300, 250), (2, 3)
    piece = cupy_stand_in.generator_states + 7
    for location in ((0, 0), (1, 2)):
        for dtype in ("float32", "float64"):
            summed = synthetic._uniform_block_sum(
                {None: {"chunk-location": location}}, seed=SEED, value_dtype=dtype,
                library="cupy", chunks_of_data=((300, 300), (250,) * 3),
                stream_elements=piece)
            number = int(np.ravel_multi_index(location, grid))
            whole = float(redrawn_sums(SEED, number, shape, dtype, "cupy")[0])
            assert float(summed.ravel()[0]) == pytest.approx(whole, rel=1e-12, abs=0)


def test_the_values_are_uniform_and_normal():
    """Plain moments over 200,000 values, at about five standard errors."""
    n = 200_000
    u = CounterGenerator(np, _sequence(9)).random(n)
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 5 * (1 / 12 / n) ** 0.5
    u32 = CounterGenerator(np, _sequence(9)).random(n, dtype=np.float32)
    assert u32.dtype == np.float32 and u32.max() < 1
    assert np.all(u32 * np.float32(2**24) == np.floor(u32 * np.float32(2**24)))  # 24-bit grid
    z = CounterGenerator(np, _sequence(9)).standard_normal(n)
    assert abs(z.mean()) < 5 / n**0.5 and abs(z.var() - 1) < 5 * (2 / n) ** 0.5
    assert abs(np.mean(z**3)) < 5 * (15 / n) ** 0.5
    k = CounterGenerator(np, _sequence(9)).integers(3, 10, n)
    assert k.min() == 3 and k.max() == 9
    assert np.all(np.abs(np.bincount(k - 3) / n - 1 / 7) < 5 * (1 / 7 / n) ** 0.5)
    with pytest.raises(ValueError, match="2\\*\\*32"):
        CounterGenerator(np, _sequence(9)).integers(0, 2**33, 3)


def test_the_host_keeps_numpys_generator(cupy_stand_in):
    """NumPy's data (and the fast checks that advance PCG64) are unchanged."""
    drawn = generator("numpy", _sequence(4)).random(10)
    np.testing.assert_array_equal(drawn, np.random.default_rng(_sequence(4)).random(10))
    generator("cupy", _sequence(4))
    assert cupy_stand_in.seeds == [seed_word(_sequence(4))]  # the device's generator, recorded


class _Kernel:
    """An ``ElementwiseKernel`` stand-in: Philox4x64's words from the array operations, or
    (``wrong``) every word off by one."""

    def __init__(self, wrong, *definition):
        self.wrong, self.definition = wrong, definition

    def __call__(self, first, key0, key1, out):
        words = numeric._array_words(sys.modules["cupy"], (int(key0), int(key1)), int(first),
                                     out.size)
        out[...] = words + np.uint64(1) if self.wrong else words


@pytest.mark.parametrize("wrong", [False, True])
def test_a_fused_kernel_is_used_only_where_its_words_are_philoxs(cupy_stand_in, monkeypatch,
                                                                  wrong):
    """On CuPy the words come from one fused kernel, checked once against the array
    operations: a kernel that gets them wrong is set aside with a warning."""
    made = []

    def elementwise_kernel(*definition):
        made.append(_Kernel(wrong, *definition))
        return made[-1]

    monkeypatch.setattr(cupy_stand_in, "ElementwiseKernel", elementwise_kernel, raising=False)
    sequence = _sequence(12)
    key = sequence.generate_state(2, np.uint64)
    reference = np.random.Philox(key=key, counter=np.full(4, 2**64 - 1, dtype=np.uint64))
    want = (reference.random_raw(1000) >> np.uint64(11)) * 2.0**-53
    if wrong:
        with pytest.warns(RuntimeWarning, match="fused random-number kernel is not used"):
            drawn = generator("cupy", sequence).random(1000)
    else:
        drawn = generator("cupy", sequence).random(1000)
    np.testing.assert_array_equal(drawn.get(), want)
    assert len(made) == 1 and "__umul64hi" in made[0].definition[2]
    assert numeric._fused_words(cupy_stand_in) is (None if wrong else made[0])


@pytest.mark.gpu
def test_the_fused_kernel_gives_numpys_philox_words_on_the_gpu():
    import cupy

    sequence = _sequence(13)
    key = sequence.generate_state(2, np.uint64)
    assert numeric._fused_words(cupy) is not None
    reference = np.random.Philox(key=key, counter=np.full(4, 2**64 - 1, dtype=np.uint64))
    words = numeric.counter_words(cupy, tuple(int(k) for k in key), 0, 4 * 2**20 + 5)
    np.testing.assert_array_equal(words.get(), reference.random_raw(4 * 2**20 + 5))
    rng = generator("cupy", sequence)
    rng.advance(4 * 2**20 + 5)
    np.testing.assert_array_equal(rng.random(7).get(),
                                  (reference.random_raw(7) >> np.uint64(11)) * 2.0**-53)
