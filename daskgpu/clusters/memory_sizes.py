"""Memory sizes as the command line and ``daskgpu.cluster`` take them, for dask and dask-cuda.

The same text means the same amount for host memory (``--memory-limit``, read by distributed)
and device memory (``--device-memory-limit``, ``--rmm-pool-size``, read by dask-cuda), although
the two libraries read a plain ``1`` differently (all of it; one byte).
"""

from __future__ import annotations

import math

import dask.utils

from daskgpu.errors import ClusterError

# A worker, a spill limit or a pool smaller than this cannot be meant: a plain number above 1
# is bytes, so "--device-memory-limit 1" would otherwise spill everything.
SMALLEST = 16 * 2**20


def parse(value, option: str = "memory size", allow_auto: bool = False,
                 allow_zero: bool = True):
    """A memory size as dask and dask-cuda read it, checked: a fraction, bytes, or text.

    A plain number from 0 to 1 is a fraction of the memory, the same for host and device
    options (``"1"`` -> 1.0, all of it); above 1 it is bytes; text with a unit stays text;
    0 means no limit; ``"auto"`` where ``allow_auto``.

    >>> parse("0.8"), parse("1"), parse("20000000000"), parse("5GB")
    (0.8, 1.0, 20000000000, '5GB')

    Raises
    ------
    ClusterError
        For text that is no size, a negative or non-finite number, a number above 1 that is
        not whole bytes, or a size below 16 MiB (a byte count where a fraction was meant).
    """
    if value is None:
        return None
    if allow_auto and isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    forms = f"a fraction of the memory (0.8){', auto' if allow_auto else ''}"
    wrong = ClusterError(f"{option} {value!r}: use bytes with a unit (20GB, 512MiB) or {forms}")
    if isinstance(value, bool):
        raise wrong
    number = _plain_number(value.strip()) if isinstance(value, str) else value
    if number is None:
        try:
            size = dask.utils.parse_bytes(value.strip())
        except (ValueError, OverflowError):
            raise wrong from None
        if size < 0:
            raise wrong
        _check_size(size, value, option, forms, allow_zero)
        return value.strip()
    if not isinstance(number, int | float) or not math.isfinite(number) or number < 0:
        raise wrong
    if 0 < number <= 1:
        return float(number)
    if isinstance(number, float):
        if not number.is_integer():
            raise wrong
        number = int(number)
    _check_size(number, value, option, forms, allow_zero)
    return number


def _check_size(size: int, value, option: str, forms: str, allow_zero: bool) -> None:
    if size >= 2**63:
        raise ClusterError(f"{option} {value!r}: larger than any memory; use {forms}")
    if size == 0:
        if not allow_zero:
            raise ClusterError(f"{option} {value!r}: for none, leave {option} out")
        return
    if size < SMALLEST:
        raise ClusterError(
            f"{option} {value!r} is {size} bytes, too small to be meant: give a unit (20GB) "
            f"or {forms}"
        )


def _plain_number(text: str) -> int | float | None:
    for kind in (int, float):
        try:
            return kind(text)
        except (ValueError, OverflowError):
            continue
    return None
