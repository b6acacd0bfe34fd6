"""Errors explained in one line: bad input or environment (exit code 2), a run that failed (1)."""

from __future__ import annotations


class DaskGPUError(Exception):
    """A problem with the user's input or environment, explained in one line.

    The command line prints the message without a traceback and exits with code 2.
    """

    exit_code = 2


class DeviceSelectionError(DaskGPUError):
    """A ``--gpus`` selection that is malformed or names devices that are not there."""


class ParameterError(DaskGPUError):
    """A pipeline parameter with a bad value."""


class InputFileError(DaskGPUError):
    """An input file that is missing, unreadable, or holds the wrong kind of data."""


class ClusterError(DaskGPUError):
    """A cluster that cannot be started or reached with the given options."""


class BackendUnavailable(DaskGPUError):
    """A backend whose libraries are not installed here."""


class UnknownPipeline(DaskGPUError):
    """A pipeline name that is not registered."""


class RunFailed(DaskGPUError):
    """A run that started but could not finish: its workers died, or all of them were lost.

    The command line prints the message and exits with code 1.
    """

    exit_code = 1
