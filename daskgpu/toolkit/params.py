"""Typed pipeline parameters: one parser per kind, shared by the CLI and the Python API."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from daskgpu.errors import InputTypeError, ParameterError


@dataclass(frozen=True)
class Param:
    """A parameter a pipeline declares.

    Attributes
    ----------
    name : str
        Python name (``size``); the CLI option is ``--size``.
    parse : callable
        Turns a user's value (text from the CLI, or a Python value) into the typed value;
        raises ``ValueError`` with a message naming what would work.
    default : object
        Used when the user gives nothing; None may mean "chosen for the hardware".
    help : str
        One line for ``--help``.
    metavar : str
        Placeholder shown in ``--help``.
    choices : tuple of str
        The allowed values, for choice parameters.
    nargs : int
        How many command-line words the option takes (``--range LO HI``: 2; a switch such as
        ``--inverse``, parsed by :func:`switch`: 0).
    """

    name: str
    parse: Callable[[Any], Any]
    default: Any = None
    help: str = ""
    metavar: str = "VALUE"
    choices: tuple[str, ...] = field(default=())
    nargs: int = 1

    @property
    def option(self) -> str:
        """The CLI option name, e.g. ``--size``."""
        return "--" + self.name.replace("_", "-")

    def convert(self, value: Any) -> Any:
        """Parse ``value``; a bad one raises ParameterError naming the option.

        A value of a type the parser cannot take (it raised ``TypeError``) raises
        InputTypeError, a ParameterError that is also a ``TypeError``.
        """
        if value is None:
            return self.default
        try:
            return self.parse(value)
        except (ValueError, TypeError, ArithmeticError) as exc:
            kind = InputTypeError if isinstance(exc, TypeError) else ParameterError
            error = kind(f"{self.option} {_shown(value)}: {exc}")
            error.reason = str(exc)  # the message without the option and value, for the CLI
            raise error from None

    @property
    def is_output(self) -> bool:
        """Whether the parameter names a file the pipeline writes (see :func:`output_path`)."""
        return bool(getattr(self.parse, "writes_output", False))


def _shown(value: Any, limit: int = 60) -> str:
    """A user's value for an error line: one line, and long values cut short.

    An array or a table is named by its type, element type and shape, never printed.
    """
    if not isinstance(value, str) and hasattr(value, "shape") and (
            hasattr(value, "dtype") or hasattr(value, "dtypes")):
        kind = type(value)
        dtype = getattr(value, "dtype", None)
        return f"{kind.__module__.split('.')[0]}.{kind.__name__}" + (
            f" {dtype}" if dtype is not None else "") + f" {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        value = " ".join(map(str, value))
    text = " ".join(str(value).split()) or repr(str(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def positive_int(value: Any) -> int:
    """An integer > 0; accepts ``20000``, ``"20_000"``, ``"2e4"``.

    >>> positive_int("2e4")
    20000
    """
    number = _integer(value)
    if number <= 0:
        raise ValueError("must be a positive integer")
    return number


def non_negative_int(value: Any) -> int:
    """An integer >= 0."""
    number = _integer(value)
    if number < 0:
        raise ValueError("must be 0 or more")
    return number


MAX_INTEGER = 2**62


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, int):
        return _bounded(value)
    text = str(value).strip().replace("_", "")
    if text.isdecimal() or (text[:1] in "+-" and text[1:].isdecimal()):
        if len(text.lstrip("+-").lstrip("0")) > 19:  # beyond int64; int() refuses 4300 digits
            raise ValueError(f"is too large (at most {MAX_INTEGER:.2e})")
        return _bounded(int(text))
    try:
        as_float = float(text)
    except ValueError:
        raise ValueError("must be an integer") from None
    if abs(as_float) > MAX_INTEGER and not math.isnan(as_float):
        if text.lstrip("+-").lower() in ("inf", "infinity"):
            raise ValueError("must be an integer")
        raise ValueError(f"is too large (at most {MAX_INTEGER:.2e})")
    if not as_float.is_integer():
        raise ValueError("must be an integer")
    return int(as_float)


def _bounded(number: int) -> int:
    if abs(number) > MAX_INTEGER:
        raise ValueError(f"is too large (at most {MAX_INTEGER:.2e})")
    return number


def chunks(value: Any) -> str | tuple[int, ...]:
    """``auto``, or a block size per axis: ``1000`` (every axis) or ``1000,5000``.

    >>> chunks("auto"), chunks("1000"), chunks("1000, 5000")
    ('auto', (1000,), (1000, 5000))
    """
    if isinstance(value, (tuple, list)):
        parts = list(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        parts = [value]
    else:
        text = str(value).strip()
        if text.lower() == "auto":
            return "auto"
        parts = [p.strip() for p in text.split(",")]
    try:
        sizes = tuple(positive_int(p) for p in parts)
    except ValueError:
        raise ValueError(
            "use 'auto', a positive block size (1000) or one per axis (1000,5000)"
        ) from None
    if not sizes:
        raise ValueError("use 'auto', a positive block size (1000) or one per axis (1000,5000)")
    return sizes


def refuse_with_input(params, values: dict, names, what: str = "data",
                      source: str = "an --input") -> None:
    """Refuse the options that only describe generated ``what``, given with an input.

    ``params``: the pipeline's declared parameters; ``names``: those that only generated data
    has; an option counts as given when its value is neither None nor its default.

    Raises
    ------
    ParameterError
        Naming the options given, e.g. ``--size, --seed: apply to generated data, not to an
        --input; drop them``.
    """
    given = [p.option for p in params
             if p.name in names and values.get(p.name) not in (None, p.default)]
    if given:
        verb, pronoun = ("applies", "it") if len(given) == 1 else ("apply", "them")
        raise ParameterError(f"{', '.join(given)}: {verb} to generated {what}, not to "
                             f"{source}; drop {pronoun}")


def switch(value: Any) -> bool:
    """An on/off parameter: True or False, or a truth word (``yes``, ``off``, ``1``, ...).

    >>> switch(True), switch("no"), switch("ON")
    (True, False, True)
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError("give true or false")


def choice(options: Sequence[str]) -> Callable[[Any], str]:
    """A parser accepting one of ``options`` (case-insensitive)."""

    def parse(value: Any) -> str:
        text = str(value).strip().lower()
        if text not in options:
            raise ValueError(f"choose one of {', '.join(options)}")
        return text

    return parse


def optional_path(value: Any) -> str | None:
    """A filesystem path as text (checked when the pipeline opens it); empty means none."""
    text = str(value).strip()
    return text or None


def finite_float(value: Any) -> float:
    """A finite real number."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    try:
        number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("must be a number") from None
    if not math.isfinite(number):
        raise ValueError("must be a finite number")
    return number


def bounded_float(low: float, high: float, why: str) -> Callable[[Any], float]:
    """A parser accepting finite numbers in ``[low, high]``; ``why`` explains the bound."""

    def parse(value: Any) -> float:
        number = finite_float(value)
        if not low <= number <= high:
            raise ValueError(f"must be between {low:g} and {high:g} ({why})")
        return number

    return parse


def value_range(value: Any) -> tuple[float, float]:
    """Two finite numbers LO < HI, given as a pair or as text ``"LO HI"`` / ``"LO,HI"``.

    >>> value_range("0 1"), value_range((-1, 2.5))
    ((0.0, 1.0), (-1.0, 2.5))
    """
    parts = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    if len(parts) != 2:
        raise ValueError("give two numbers, LO HI")
    lo, hi = (finite_float(p) for p in parts)
    if not lo < hi:
        raise ValueError(f"LO must be below HI (got {lo:g} >= {hi:g})")
    return lo, hi


def output_path(suffixes: Sequence[str]) -> Callable[[Any], str | None]:
    """A parser for a file to write: one of ``suffixes``, in a directory that exists.

    The parser is marked ``writes_output``: a :class:`Param` using it is an output, which a
    run refuses to overwrite unless asked to (see ``Pipeline.check_outputs``).
    """

    def parse(value: Any) -> str | None:
        text = str(value).strip()
        if not text:
            return None
        if not text.lower().endswith(tuple(suffixes)):
            raise ValueError(f"name a {' or '.join(suffixes)} file")
        parent = os.path.dirname(os.path.abspath(text))
        if not os.path.isdir(parent):
            raise ValueError(f"directory {parent} does not exist")
        if os.path.isdir(text) and not text.lower().endswith(".zarr"):
            raise ValueError("is a directory")
        return text

    parse.writes_output = True
    return parse


def path_or_object(accepted: str) -> Callable[[Any], Any]:
    """A parser of an input: a path as text (as :func:`optional_path`), or an object passed on.

    The pipeline's ``settle`` opens either, refusing in one line what it cannot read (an
    ``InputTypeError`` for a list, say). A number is refused here: it is neither a path nor
    data, and text made of it would be taken for a path. ``accepted`` says what works.

    >>> path_or_array(" x.npy "), path_or_frame(b"t.csv")
    ('x.npy', 't.csv')
    """
    import numbers  # only these parsers need it

    def parse(value: Any) -> Any:
        if value is None or isinstance(value, (str, bytes, os.PathLike)):
            return optional_path(os.fsdecode(value) if value is not None else "")
        if isinstance(value, numbers.Number):
            name = type(value).__name__
            raise TypeError(f"{'an' if name[:1] in 'aeiou' else 'a'} {name} is not an input "
                            f"daskgpu reads; give {accepted}")
        return value

    return parse


#: An array input: a ``.npy`` file or Zarr array, or a NumPy, CuPy or Dask array in hand.
path_or_array = path_or_object("a path (.npy file or Zarr array) or a NumPy, CuPy or Dask array")
#: A table input: Parquet or CSV files, or a pandas, cuDF or Dask DataFrame in hand.
path_or_frame = path_or_object("a path (Parquet or CSV) or a pandas, cuDF or Dask DataFrame")
