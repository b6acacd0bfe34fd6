"""The toolkit's PCG64 helpers against NumPy's own generator."""

from __future__ import annotations

import numpy as np
import pytest

from daskgpu.toolkit import pcg64


def _bits(seed: int = 3) -> np.random.PCG64:
    return np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(1,)))


@pytest.mark.parametrize("steps", [0, 1, 2, 3, 12_345, 2**40 + 7, 2**127 + 5])
def test_distance_counts_the_steps_advance_takes(steps):
    bits = _bits()
    start = bits.state["state"]
    bits.advance(steps)
    assert pcg64.distance(start["state"], bits.state["state"]["state"], start["inc"]) == steps


def test_state_words_restore_the_generator_mid_stream():
    """Noted after some float32 normals (a half word kept), placed again: the same values."""
    rng = np.random.Generator(_bits())
    rng.standard_normal(1001, dtype=np.float32)
    words = pcg64.state_words(rng.bit_generator.state)
    assert len(words) == pcg64.WORDS and all(0 <= w < 2**64 for w in words)
    expected = rng.standard_normal(50, dtype=np.float32)
    bits = _bits()
    assert pcg64.place(bits, 1001, words, half=True) is None
    np.testing.assert_array_equal(np.random.Generator(bits).standard_normal(50, dtype=np.float32),
                                  expected)


def test_place_refuses_another_stream_and_an_implausible_distance():
    rng = np.random.Generator(_bits())
    rng.standard_normal(10_000)
    words = pcg64.state_words(rng.bit_generator.state)
    other = pcg64.state_words(np.random.PCG64(np.random.SeedSequence(3, spawn_key=(2,))).state)
    assert "not on this block's stream" in pcg64.place(_bits(), 10_000, other)
    assert "draws into the block's stream" in pcg64.place(_bits(), 20_000, words)
    assert "draws into the block's stream" in pcg64.place(_bits(), 5_000, words)
    assert pcg64.place(_bits(), 10_000, words) is None
