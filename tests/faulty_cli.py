"""``python tests/faulty_cli.py ARGS``: ``cli.py``, with the fault ``DASKGPU_TEST_FAULT`` names.

See :func:`fault_injection.inject_from_environment`. Multiprocessing imports this file again in
each worker process it spawns (as ``__mp_main__``), where the fault may act too.
"""

import sys

import fault_injection

fault_injection.inject_from_environment(__name__)
sys.path.insert(0, str(fault_injection.ROOT))

import cli  # noqa: E402  (after the fault: cli.py reads nothing of it)

if __name__ == "__main__":
    sys.exit(cli.main())
