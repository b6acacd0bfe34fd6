"""The CPU workers' fork server imports this first: distributed's pre-spawn environment.

See :func:`daskgpu.clusters.worker_processes.apply_pre_spawn_environ`. Importing it changes this
process's environment: only the fork server does (``worker_processes.PRELOAD``).
"""

from daskgpu.clusters import worker_processes

worker_processes.apply_pre_spawn_environ()
