"""What a command-line run does before its commands load: a head start, and a quick exit.

``python cli.py`` calls :func:`head_start` before it imports click or the commands: where the
command will start CPU workers, the server they are forked from starts importing numpy, dask
and the pipeline now, beside this program's own imports, and imports this program too, as a
worker would (see :mod:`daskgpu.clusters.worker_processes`). Stdlib only: it runs first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from collections.abc import Callable

# Whether this command line was already looked at for a head start: the installed ``daskgpu``
# command and in-process calls of ``main`` look when they resolve the command instead.
considered = False

# main()'s exit code once it has returned, for _exit_now.
_ending: dict[str, int] = {}


def head_start(argv: list[str], module_of: Callable[[str], str | None]) -> None:
    """Exit quickly at the end, and start the CPU workers' fork server if the command needs one.

    Parameters
    ----------
    argv : list of str
        The command line's arguments, without the program.
    module_of : callable
        A built-in pipeline's module from its name (None for any other name).
    """
    global considered
    exit_quickly()  # first: it runs last (see _exit_now)
    from daskgpu.clusters import worker_processes

    worker_processes.start_for_command_line(argv, module_of, main=True)
    considered = True


def exit_quickly() -> None:
    """End the process as soon as the exit handlers registered after this call have run."""
    atexit.register(_exit_now)


def finish(code: int) -> None:
    """Exit with ``code``, the value :func:`daskgpu.cli.commands.main` returned."""
    _ending["code"] = code
    sys.exit(code)


def _exit_now() -> None:
    """End the process once the exit handlers registered after this one have run.

    The interpreter would go on to tear down every module and object it loaded (a sixth of a
    second after a run on two cores), none of it the user's. Exit handlers run last to first:
    registered before the others (the cluster's, the fork server's), this one runs after
    them. Only after :func:`daskgpu.cli.commands.main` returned: an exception out of it ends as
    Python ends it.
    """
    if "code" not in _ending:
        return
    if "logging" in sys.modules:  # its handler may have been registered before this one
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(_ending["code"])
