"""Typed pipeline parameters: one parser per kind, shared by the CLI and the Python API."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from daskgpu.errors import ParameterError


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
    """

    name: str
    parse: Callable[[Any], Any]
    default: Any = None
    help: str = ""
    metavar: str = "VALUE"
    choices: tuple[str, ...] = field(default=())

    @property
    def option(self) -> str:
        """The CLI option name, e.g. ``--size``."""
        return "--" + self.name.replace("_", "-")

    def convert(self, value: Any) -> Any:
        """Parse ``value``; a bad one raises ParameterError naming the option."""
        if value is None:
            return self.default
        try:
            return self.parse(value)
        except (ValueError, TypeError) as exc:
            raise ParameterError(f"{self.option} {value}: {exc}") from None


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


def _integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    if isinstance(value, int):
        return value
    text = str(value).strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        as_float = float(text)
    except ValueError:
        raise ValueError("must be an integer") from None
    if not as_float.is_integer() or abs(as_float) > 2**62:
        raise ValueError("must be an integer")
    return int(as_float)


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
    return sizes


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
