"""Work-arounds for the numba-cuda releases daskgpu's kernels meet on GPU machines.

Applied when ``daskgpu.kernels`` is imported, so before any of its kernels is compiled.
"""

from __future__ import annotations

import numpy as np


def restore_row_stack() -> bool:
    """Alias ``numpy.row_stack`` to ``numpy.vstack`` where numpy no longer has it.

    numpy 2.5 removed ``row_stack`` (deprecated since 2.0, where it just calls ``vstack``), but
    numba-cuda, up to 0.30.4 at least (the project is in maintenance mode and has not taken the
    fix), registers an overload of it whenever numpy >= 2.0, in ``numba/cuda/np/arrayobj.py``,
    which the CUDA target imports before it compiles anything: without the name, no kernel
    compiles (AttributeError). numba's own CPU target has checked for numpy 2.5 since 0.67.
    Remove this once numba-cuda stops registering the overload on numpy >= 2.5 (or daskgpu
    leaves numba-cuda), i.e. when ``tests/kernels/test_numba_compat.py`` skips, saying it can go.

    Returns
    -------
    bool
        True if the alias was added, False if numpy has ``row_stack`` (it is left as it is).
    """
    if hasattr(np, "row_stack"):
        return False
    np.row_stack = np.vstack
    return True
