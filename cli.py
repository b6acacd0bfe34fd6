"""daskgpu command line: ``python cli.py run mean-pipeline --gpus 0,1``.

The commands are in :mod:`daskgpu.cli.commands`. This file gives a run a head start before they
load (:func:`daskgpu.cli.launch.head_start`) and exits with their exit code. ``import cli``
gives ``cli.main`` and ``cli.entry``, loaded on first use: the CPU workers, which import this
file again (as multiprocessing's ``__mp_main__``), load none of the commands.
"""

import sys

if __name__ == "__main__":
    from daskgpu.cli import launch
    from pipelines import BUILTIN

    launch.head_start(sys.argv[1:], BUILTIN.get)

    from daskgpu.cli.commands import main

    launch.finish(main())

_COMMANDS = ("entry", "main")


def __getattr__(name: str):
    if name in _COMMANDS:
        from daskgpu.cli import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'cli' has no attribute {name!r}")
