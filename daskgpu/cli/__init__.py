"""The command line's code: ``python cli.py`` and the installed ``daskgpu`` command call it.

:mod:`daskgpu.cli.commands` holds the commands, :mod:`daskgpu.cli.options` their options,
:mod:`daskgpu.cli.launch` what a run does before they load. Nothing in the library imports it.
"""
