"""numba-cuda under numpy >= 2.5: daskgpu's kernels make its CUDA target importable again."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import ROOT

# numpy 2.5 has no row_stack; on older numpy it is deleted here, in a fresh interpreter.
WITHOUT_ROW_STACK = """
import numpy
if hasattr(numpy, "row_stack"):
    del numpy.row_stack
{before}
try:
    from numba.cuda.np import arrayobj  # what numba-cuda's CUDA target loads to compile
except AttributeError as e:
    print("import failed:", e)
    raise SystemExit(3)
print("imported", arrayobj.__name__)
{after}
"""

# Compiled for the real CUDA target (no GPU needed), as a worker does at its first launch.
COMPILE_A_KERNEL = """
from numba.cuda import types
from numba.cuda.compiler import compile_cuda
from daskgpu.kernels import stencil
grid = types.Array(types.float64, 2, "C")
sig = (grid, grid, types.float64, types.float64) + (types.int64,) * 4
cres = compile_cuda(stencil._step_kernel.py_func, types.void, sig, cc=(9, 0))
print("compiled", len(cres.library.get_llvm_str()) > 0)
print("row_stack is vstack", numpy.row_stack is numpy.vstack)
"""


def run_without_row_stack(before: str = "", after: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(ROOT)
    code = WITHOUT_ROW_STACK.format(before=before, after=textwrap.dedent(after))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600, cwd=ROOT)


def test_numba_cuda_compiles_kernels_without_numpy_row_stack():
    bare = run_without_row_stack()
    if bare.returncode == 0:
        pytest.skip("this numba-cuda imports without numpy.row_stack: "
                    "daskgpu.kernels.compat.restore_row_stack can go")
    assert bare.returncode == 3, bare.stderr
    assert "row_stack" in bare.stdout

    fixed = run_without_row_stack(before="import daskgpu.kernels", after=COMPILE_A_KERNEL)
    assert fixed.returncode == 0, f"{fixed.stdout}\n{fixed.stderr}"
    assert "imported" in fixed.stdout
    assert "compiled True" in fixed.stdout
    assert "row_stack is vstack True" in fixed.stdout


def test_row_stack_left_alone_where_numpy_has_it():
    if not hasattr(np, "row_stack"):
        pytest.skip("this numpy has no row_stack")
    from daskgpu.kernels import compat

    before = np.row_stack
    assert compat.restore_row_stack() is False
    assert np.row_stack is before
