"""daskgpu command line: ``python cli.py run mean-pipeline --gpus 0,1``.

The commands are in :mod:`daskgpu.cli.commands`. This file gives a run a head start before they
load (:func:`daskgpu.cli.launch.head_start`) and exits with their exit code.
"""

import sys

if __name__ == "__main__":
    from daskgpu.cli import launch
    from pipelines import BUILTIN

    launch.head_start(sys.argv[1:], BUILTIN.get)

from daskgpu.cli.commands import entry, main  # noqa: E402  (after the head start above)

__all__ = ["entry", "main"]

if __name__ == "__main__":
    launch.finish(main())
