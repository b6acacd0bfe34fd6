"""Run code in Numba's CUDA simulator, which must be enabled before numba is first imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT


def run_in_simulator(code: str, timeout: int = 600) -> str:
    """Run ``code`` in a fresh interpreter with ``NUMBA_ENABLE_CUDASIM=1``; return its stdout.

    The code asserts what it checks (numpy.testing); a failure fails the calling test with the
    subprocess's output.
    """
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT,
    )
    assert proc.returncode == 0, f"simulator run failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout
