"""Can a GPU worker launch a Numba CUDA kernel? Asked once, as a GPU cluster starts.

numba-cuda compiles kernels to PTX with NVVM and hands the PTX to the driver, whose JIT accepts
PTX up to the ISA version of the CUDA it ships with: NVVM from a newer CUDA toolkit than the
driver (PTX ``.version 9.5`` from NVVM 13.5 against a CUDA 13.0 driver, which takes 9.0 at
most) fails at the first launch, unless numba-cuda links through nvJitLink, which lowers the
PTX itself. Without this probe that failure would surface inside the first timed task of the
first pipeline with a kernel, as a traceback; here it is one line, before any run, naming the
versions and the fix.
"""

from __future__ import annotations

import importlib.metadata

from daskgpu.errors import ClusterError

#: What to do when the driver cannot take the PTX that numba-cuda writes.
PTX_FIX = ("the PTX numba-cuda's NVVM writes is newer than this driver's JIT accepts: install "
           "numba-cuda with nvJitLink for the driver's CUDA major version (pip install "
           "'numba-cuda[cu13]', or [cu12]), or update the NVIDIA driver")
#: What to do about any other failure to launch.
OTHER_FIX = "check the GPU and its driver with nvidia-smi, or run with --cpu"


def kernel_launch_problem() -> str | None:
    """On a GPU worker: compile and launch a one-thread kernel; why that failed, or None."""
    try:
        _launch_one_thread()
    except Exception as exc:  # any failure here is the answer, said in one line
        return describe(exc)
    return None


def _launch_one_thread() -> None:
    import numpy as np
    from numba import cuda

    @cuda.jit
    def write_one(out):
        out[0] = 1

    out = cuda.device_array(1, np.int32)
    write_one[1, 1](out)
    if int(out.copy_to_host()[0]) != 1:
        raise RuntimeError("the probe kernel ran but did not write its value")


def versions() -> str:
    """numba-cuda's version and the CUDA driver's, as far as they can be read."""
    try:
        package = f"numba-cuda {importlib.metadata.version('numba-cuda')}"
    except importlib.metadata.PackageNotFoundError:
        import numba

        package = f"numba {numba.__version__} (its own CUDA target)"
    try:
        from numba.cuda.cudadrv.driver import driver

        major, minor = driver.get_version()
        return f"{package}, CUDA driver {major}.{minor}"
    except Exception:  # the driver that cannot launch may not say its version either
        return f"{package}, CUDA driver version unknown"


def describe(exc: BaseException) -> str:
    """One line: what failed, the versions, and the fix for a PTX too new for the driver."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    fix = PTX_FIX if "PTX" in text.upper() else OTHER_FIX
    return (f"a GPU worker cannot launch a Numba CUDA kernel ({type(exc).__name__}: "
            f"{text[:300]}; {versions()}); {fix}")


def check_kernel_launch(client) -> None:
    """In the client: refuse a GPU cluster where a worker cannot launch a CUDA kernel.

    Raises
    ------
    ClusterError
        In one line, naming the first such worker, the versions and the fix.
    """
    problems = {a: why for a, why in client.run(kernel_launch_problem).items() if why}
    if problems:
        address, why = sorted(problems.items())[0]
        raise ClusterError(f"worker {address}: {why}")
