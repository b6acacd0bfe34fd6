"""Errors that mean "the user asked for something that cannot be done" (exit code 2)."""

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
