"""The CPU workers' fork server imports the program that started it, as a worker would.

multiprocessing imports a process's ``__main__`` file again (as ``__mp_main__``) in each
process it starts from it, before that process does anything: a worker forked from a server
that has it imported already skips that. (The fork server's own ``"__main__"`` preload would do
this, but Python before 3.12 never hands the server the file.) Which file: the environment's
``DASKGPU_FORK_SERVER_MAIN``, set by
:func:`daskgpu.clusters.worker_processes.start_for_command_line`. A file that fails to import is
left for each worker to import, as without this.
"""

import logging
import os
from multiprocessing import spawn

from daskgpu.clusters.worker_processes import MAIN_VARIABLE

_path = os.environ.pop(MAIN_VARIABLE, None)
if _path:
    try:
        spawn.import_main_path(_path)
    except Exception as exc:  # the workers import it themselves, and say what is wrong
        logging.getLogger(__name__).debug("fork server: %s not imported: %s", _path, exc)
