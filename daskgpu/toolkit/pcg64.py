"""NumPy's PCG64 generator, as a check sees it: its state noted, placed again, and measured.

A run that draws a block of random values in pieces (cells) can note the generator's state as
each piece begins (:func:`state_words`); a check then draws a piece again on its own, once the
noted state is shown to lie on the block's stream at a plausible distance from its start
(:func:`place`, :func:`distance`). Uniform values take a fixed number of words each, so a check
can :meth:`~numpy.random.PCG64.advance` to them instead; normal values do not (the ziggurat
sampler rejects a few draws), hence the noted states.
"""

from __future__ import annotations

import numpy as np

#: PCG64's 128-bit LCG multiplier (PCG's default for 128-bit states), and the state's mask.
MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645
MASK128 = 2**128 - 1
#: Normal values take a word each, more on the sampler's rare rejections (about 2 % more): a
#: piece's state may lie this share of its values, plus NORMAL_SLACK words, past its first value.
NORMAL_EXTRA = 1 / 8
NORMAL_SLACK = 64
#: How :func:`state_words` lays a state out: six uint64 words.
WORDS = 6


def state_words(state: dict) -> list[int]:
    """``PCG64``'s state (``bit_generator.state``) as six 64-bit words.

    The state's high and low words, the increment's high and low words, ``has_uint32`` and
    ``uinteger`` (the half word kept for the next 32-bit draw).

    >>> bits = np.random.PCG64(1)
    >>> words = state_words(bits.state)
    >>> (words[0] << 64 | words[1]) == bits.state["state"]["state"], len(words)
    (True, 6)
    """
    low, inner = 2**64 - 1, state["state"]
    return [inner["state"] >> 64, inner["state"] & low, inner["inc"] >> 64, inner["inc"] & low,
            int(state["has_uint32"]), int(state["uinteger"])]


def distance(start: int, end: int, inc: int) -> int:
    """Steps of PCG64's LCG (increment ``inc``) from state ``start`` to state ``end``.

    Bit by bit from the lowest: the low k bits of the state cycle with period 2**k, so the step
    count's bit k is fixed by whether a jump of 2**k steps is needed to match bit k of ``end``;
    the jump's multiplier and increment square along (as ``advance`` computes them).

    >>> bits = np.random.PCG64(7)
    >>> start = bits.state["state"]
    >>> _ = bits.advance(12_345)
    >>> distance(start["state"], bits.state["state"]["state"], start["inc"])
    12345
    """
    mult, plus, steps, bit = MULTIPLIER, inc, 0, 1
    while start != end and bit <= MASK128:
        if (start ^ end) & bit:
            start = (start * mult + plus) & MASK128
            steps |= bit
        plus = ((mult + 1) * plus) & MASK128
        mult = (mult * mult) & MASK128
        bit <<= 1
    return steps


def place(bits: np.random.PCG64, first: int, words, half: bool = False) -> str | None:
    """Set ``bits`` (at its block's seeded state) to the noted state of normal value ``first``.

    Parameters
    ----------
    bits : numpy.random.PCG64
        The block's generator, at its seeded state.
    first : int
        The index in the block's stream of the piece's first normal value.
    words : sequence of int
        The state the run noted (:func:`state_words`).
    half : bool
        The values take half a word each (float32).

    Returns
    -------
    str or None
        Why the state cannot be that of value ``first`` (another stream, or too far from the
        start), ``bits`` unchanged; or None, ``bits`` set to it.
    """
    seeded = bits.state
    state = (int(words[0]) << 64) | int(words[1])
    inc = (int(words[2]) << 64) | int(words[3])
    if inc != seeded["state"]["inc"]:
        return "the noted generator state is not on this block's stream"
    steps = distance(seeded["state"]["state"], state, inc)
    drawn = 2 * steps - int(words[4]) if half else steps
    if not first <= drawn <= first + first * NORMAL_EXTRA + NORMAL_SLACK:
        return (f"the noted generator state lies {drawn} draws into the block's stream, not "
                f"{first} to {first + first * NORMAL_EXTRA + NORMAL_SLACK:.0f}")
    bits.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                  "has_uint32": int(words[4]), "uinteger": int(words[5])}
    return None
