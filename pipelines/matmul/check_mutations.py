"""The wrong results matmul-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification import Mutation


def _altered(change, totals: bool = True):
    """``change`` on a copy of the result; with ``totals``, C's norm and sum recomputed after."""
    def alter(raw: dict) -> dict:
        result = {key: np.array(value, copy=True) if isinstance(value, np.ndarray) else value
                  for key, value in raw["result"].items()}
        change(result)
        if totals:
            result["frobenius_norm"] = math.sqrt(math.fsum(result["block_squares"].flat))
            result["sum"] = math.fsum(result["block_sums"].flat)
        return {**raw, "result": result}
    return alter


def _scale_block(result: dict) -> None:
    height = int(result["block_rows"][-1])  # the last block of C: last rows, last columns
    result["partials"][-height:, -1, :] *= 1.001
    result["block_sums"][-1, -1] *= 1.001
    result["block_squares"][-1, -1] *= 1.001**2


def _zero_block(result: dict) -> None:
    for key in ("partials", "block_sums", "block_squares"):  # the last column block all zero
        result[key][:, -1] = 0.0


def _misplaced_blocks(result: dict) -> None:
    if result["partials"].shape[1] > 1:
        for key in ("partials", "block_sums", "block_squares"):
            result[key] = np.roll(result[key], 1, axis=1)
    else:
        result["partials"] = np.roll(result["partials"], 1, axis=0)


def _changed(key: str, change, index=None):
    """``result[key]`` (at ``index`` alone, if given) changed by ``change``."""
    def alter(result: dict) -> None:
        if index is None:
            result[key] = change(result[key])
        else:
            result[key][index] = change(result[key][index])
    return alter


# What a failed check's detail names (a regular expression, see Mutation.names).
FREIVALDS = r"Freivalds' check: block \(\d+, \d+\) of C"
MUTATIONS = (
    Mutation("one block of C scaled by 1.001", _altered(_scale_block), FREIVALDS),
    Mutation("a column block of C zero", _altered(_zero_block),
             FREIVALDS + r", row \d+, vector \d+: C r = 0,"),
    Mutation("blocks of C in the wrong places", _altered(_misplaced_blocks), FREIVALDS),
    Mutation("a sampled entry changed by 0.1 %",
             _altered(_changed("samples", lambda x: x * 1.001, 0)),
             r"sampled cell C\[\d+, \d+\]: \S+ reported"),
    Mutation("a block's squares lost",
             _altered(_changed("block_squares", lambda x: 0.0, (0, 0))),
             r"block \(0, 0\) of C: sum of squares 0 outside"),
    Mutation("Frobenius norm altered",
             _altered(_changed("frobenius_norm", lambda x: x * 1.01), totals=False),
             r"^Frobenius norm \S+ is not the root of its blocks' squares"),
    Mutation("sum altered",
             _altered(_changed("sum", lambda x: x + 1.0 + abs(x) * 1e-6), totals=False),
             r"^sum \S+ is not the total of its blocks' sums"),
)
