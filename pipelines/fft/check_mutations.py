"""The wrong results fft-pipeline's check must reject, at both depths (``MUTATIONS``)."""

from __future__ import annotations

import math

import numpy as np

from daskgpu.verification import Mutation


def _altered(change, add_up: bool = True):
    """A mutation: a copy of the result with ``change`` made, its total added up again."""
    def alter(raw: dict) -> dict:
        result = {**raw["result"], **{key: np.array(raw["result"][key], copy=True) for key in (
            "column_squares", "peak_rows", "peak_cols", "peak_values", "samples")}}
        change(result)
        if add_up:
            result["sum_of_squares"] = math.fsum(result["column_squares"].tolist())
        return {**raw, "result": result}
    return alter


def _moved_peak(result: dict) -> None:
    top = int(np.argmax(np.abs(result["peak_values"])))
    result["peak_cols"][top] = (result["peak_cols"][top] + 1) % len(result["column_squares"])


def _scaled_block(result: dict) -> None:
    c0 = int(np.sum(result["col_chunks"][:-1]))  # the last column block of the spectrum
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


def _total_altered(result: dict) -> None:
    result["sum_of_squares"] *= 1.01


# What a failed check's detail names (regular expressions, see Mutation.names).
PEAK = r"peak 0 \(|reported peak [Xx]\["
PARSEVAL = r"Parseval's identity fails: the spectrum's sum of squares"
MUTATIONS = (
    Mutation("the largest peak moved by one column", _altered(_moved_peak), PEAK),
    Mutation("the last column block scaled by 1.001", _altered(_scaled_block), PARSEVAL),
    Mutation("the spectrum conjugated", _altered(_conjugated),
             r"sampled cell X\[\d+, \d+\]: \S+ reported"),
    # in a spectrum that is not square (rfft2's half), a transposed peak may fall outside it
    Mutation("the peaks transposed", _altered(_transposed),
             PEAK + r"|^a reported peak lies outside the spectrum"),
    Mutation("a column's squares lost", _altered(_lost_column), PARSEVAL),
    Mutation("sum of squares altered", _altered(_total_altered, add_up=False),
             r"^sum of squares \S+ is not the total of its columns'"),
)
