"""Errors explained in one line: bad input or environment (2), a run that could not finish (1, 3).

The exit codes of the command line: 1 when the workers died, 3 when a task raised or a
pipeline's own code raised in this process.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator


def printable(text: str) -> str:
    """``text`` on one line: control characters (a newline in a file name) escaped."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


class DaskGPUError(Exception):
    """A problem with the user's input or environment, explained in one line.

    The command line prints the message without a traceback and exits with code 2. The
    errors in what a caller gave (a parameter, an input, a device selection, a pipeline's
    name) are also ``ValueError``, so that ``except ValueError`` catches them as it does
    NumPy's and scikit-learn's; a missing input is also ``FileNotFoundError``, and an input
    of the wrong type also ``TypeError``.
    """

    exit_code = 2


class DeviceSelectionError(DaskGPUError, ValueError):
    """A ``--gpus`` selection that is malformed or names devices that are not there."""


class ParameterError(DaskGPUError, ValueError):
    """A pipeline parameter with a bad value."""


class InputTypeError(ParameterError, TypeError):
    """A value of a type that cannot be used: an input neither a path nor an array or table."""


class InputFileError(DaskGPUError, ValueError):
    """An input that is unreadable or holds the wrong kind of data: a file, or an object."""


class MissingInputError(InputFileError, FileNotFoundError):
    """An input path where there is no file or directory."""


class ClusterError(DaskGPUError):
    """A cluster that cannot be started or reached with the given options."""


class BackendUnavailable(DaskGPUError):
    """A backend whose libraries are not installed here."""


class UnknownPipeline(DaskGPUError, ValueError):
    """A pipeline name that is not registered."""


class RunFailed(DaskGPUError):
    """A run that started but could not finish: its workers died, or all of them were lost.

    The command line prints the message and exits with code 1.
    """

    exit_code = 1


class TaskFailed(DaskGPUError):
    """A task that raised an exception on a worker: the computation itself failed.

    The message names the task, the worker (and its GPU) and the exception; the worker's
    exception, with its traceback, is the ``__cause__``. The command line prints the message
    and exits with code 3.

    Attributes
    ----------
    task : str or None
        The task that raised (its name, without the token).
    worker : str or None
        The address of the worker it raised on, where the scheduler knew it.
    device : Device or None
        That worker's GPU, where it is one of the run's devices.
    """

    exit_code = 3
    task: str | None = None
    worker: str | None = None
    device = None


class GPUError(TaskFailed):
    """A CUDA error in a task (exit code 3).

    Out of device memory, a CUDA runtime or driver error, or a kernel that does not compile.
    """


class VerificationFailed(DaskGPUError):
    """A result that did not check out: an estimator's ``fit`` raises it on a wrong answer.

    The message says what disagreed (the verification's detail); exit code 1, as a run whose
    answer did not verify.

    Attributes
    ----------
    result : RunResult or None
        The run whose answer failed its check.
    """

    exit_code = 1
    result = None


class PipelineFailed(DaskGPUError):
    """An exception raised by a pipeline's own code in this process.

    Its ``settle``, ``prepare``, ``verify``, ``present``, ``save`` or ``baseline``. The message
    names the pipeline, the hook and the exception; the exception, with its traceback, is the
    ``__cause__``. The command line prints the message and exits with code 3, as for a task
    that raised on a worker.
    """

    exit_code = 3


@contextlib.contextmanager
def pipeline_code(pipeline: str, hook: str) -> Iterator[None]:
    """Around a call of a pipeline's ``hook``: an exception it raises becomes a PipelineFailed.

    A :class:`DaskGPUError` (a refusal in one line, already) passes through as it is.
    """
    try:
        yield
    except DaskGPUError:
        raise
    except Exception as exc:
        detail = " ".join(str(exc).split()) or "(no message)"
        raise PipelineFailed(f"{pipeline}: its {hook} raised {type(exc).__name__}: "
                             f"{detail}") from exc


# Flags of the command line, as a Python caller spells them.
_PYTHON_FLAGS = {
    "--overwrite": "overwrite=True",
    "--cpu": "cpu=True",
    "--no-dashboard": "dashboard=False",
    "--sweep": "sweep=True",
    "--weak": "weak=True",
}
_OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)(?: (\S+?)(?=[:;,)]|\s|$))?")


def python_spelling(message: str) -> str:
    """A message naming command-line options, with the Python keyword names instead.

    >>> python_spelling("--chunks 0: must be positive; or --cpu")
    'chunks=0: must be positive; or cpu=True'
    >>> python_spelling("--gpus and --cpu contradict each other")
    'gpus=... and cpu=True contradict each other'
    """

    def keyword(match: re.Match) -> str:
        option, word = "--" + match.group(1), match.group(2)
        after = f" {word}" if word else ""
        if option in _PYTHON_FLAGS:
            return _PYTHON_FLAGS[option] + after
        name = match.group(1).replace("-", "_")
        is_value = word and (match.string[match.end():match.end() + 1] == ":"
                             or not word.isalpha())
        return f"{name}={word}" if is_value else f"{name}=...{after}"

    return _OPTION.sub(keyword, message)


@contextlib.contextmanager
def python_names() -> Iterator[None]:
    """Around a Python API call: a DaskGPUError names ``chunks=``, not ``--chunks``."""
    try:
        yield
    except DaskGPUError as exc:
        if getattr(exc, "python_spelling", False):
            raise
        again = type(exc)(python_spelling(str(exc)))
        again.__dict__.update(exc.__dict__)  # what a TaskFailed knows, and its cause
        again.python_spelling = True
        raise again from exc.__cause__
