"""A task that raises on a worker, a CUDA error above all: one line naming the task, the worker
and its GPU, exit code 3 (1 means a failed verification), and a TaskFailed in Python.

CuPy, Numba's CUDA driver and RMM are not installed here: the tasks raise exceptions whose class
has their module and name (fault_injection.exception_like), as a worker that has them would.
"""

from __future__ import annotations

import doctest
import os
import re

import fault_injection
import pytest
from conftest import TWO_GPUS, assert_one_error_line
from fault_injection import exception_like, failing_pipeline, run_faulty_cli, working_pipeline

import daskgpu
from daskgpu.clusters.devices import Device
from daskgpu.errors import GPUError, PipelineFailed, TaskFailed
from daskgpu.execution import task_errors
from daskgpu.toolkit.backends import Backend

OOM = "out of device memory"
CUDA = "CUDA error"
COMPILE = "a kernel did not compile"

CUPY_OOM = ("cupy.cuda.memory", "OutOfMemoryError",
            "Out of memory allocating 1,024 bytes (allocated so far: 0 bytes).")
RMM_OOM = ("builtins", "MemoryError", "std::bad_alloc: out_of_memory: RMM failure at:/opt/rmm/"
           "include/rmm/mr/device/pool_memory_resource.hpp:257: Maximum pool size exceeded")
NUMBA_OOM = ("numba.cuda.cudadrv.driver", "CudaAPIError",
             "[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY")


@pytest.mark.parametrize(
    ("module", "name", "message", "kind"),
    [
        (*CUPY_OOM, OOM),
        (*RMM_OOM, OOM),
        (*NUMBA_OOM, OOM),
        ("cupy_backends.cuda.api.runtime", "CUDARuntimeError",
         "cudaErrorMemoryAllocation: out of memory", OOM),
        ("cupy_backends.cuda.api.runtime", "CUDARuntimeError",
         "cudaErrorIllegalAddress: an illegal memory access was encountered", CUDA),
        ("cupy_backends.cuda.api.driver", "CUDADriverError",
         "CUDA_ERROR_LAUNCH_FAILED: unspecified launch failure", CUDA),
        ("numba.cuda.cudadrv.driver", "CudaAPIError",
         "[700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS", CUDA),
        ("numba.cuda.cudadrv.error", "CudaSupportError", "Error at driver init",
         "CUDA is not usable on the worker"),
        ("numba.cuda.cudadrv.error", "NvvmError", "Failed to compile", COMPILE),
        ("numba.cuda.cudadrv.error", "NvrtcError", "NVRTC_ERROR_COMPILATION", COMPILE),
        ("numba.core.errors", "TypingError", "Failed in cuda mode pipeline", COMPILE),
        ("numba.core.errors", "LoweringError", "Failed in cuda mode pipeline", COMPILE),
        ("cupy.cuda.compiler", "CompileException", "error: identifier x is undefined", COMPILE),
        ("builtins", "MemoryError", "", "none"),  # the host's own: not a GPU's
        ("builtins", "ValueError", "out_of_memory", "none"),
        ("mylib.errors", "OutOfMemoryError", "Out of memory", "none"),
    ],
)
def test_cuda_errors_are_told_by_their_class(module, name, message, kind):
    found = task_errors.cuda_error_kind(exception_like(module, name, message))
    if kind == "none":
        assert found is None
    else:
        assert found is not None and found[0] == kind


def test_doctests():
    result = doctest.testmod(task_errors, verbose=False, report=True)
    assert result.attempted > 0 and result.failed == 0


# --------------------------------------------------------------------------- the command line

FAILING_RUN = ("run", "failing-task", "--cpu", "--workers", "1", "--no-dashboard", "--quiet")


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        pytest.param(CUPY_OOM, "out of device memory in task '[\\w-]+' \\(cupy OutOfMemoryError: "
                     "Out of memory allocating 1,024 bytes \\(allocated so far: 0 bytes\\)\\); "
                     "use smaller blocks \\(--chunks", id="cupy-out-of-memory"),
        pytest.param(RMM_OOM, "out of device memory in task '[\\w-]+' \\(MemoryError: "
                     "std::bad_alloc: out_of_memory: RMM failure", id="rmm-bad-alloc"),
        pytest.param(NUMBA_OOM, "out of device memory in task '[\\w-]+' \\(numba CudaAPIError: "
                     "\\[2\\] Call to cuMemAlloc", id="numba-driver"),
    ],
)
def test_a_cuda_error_on_a_worker_is_one_line_and_exit_3(fault, expected):
    proc = run_faulty_cli(*FAILING_RUN, raise_=fault, timeout=120)
    line = assert_one_error_line(proc, code=3)
    # A CPU worker here: no GPU to name, but the worker that ran the task.
    assert re.match(r"error: worker tcp://127\.0\.0\.1:\d+: ", line), line
    assert re.search(expected, line), line


def test_any_task_error_is_one_line_naming_the_worker_and_the_code():
    proc = run_faulty_cli(*FAILING_RUN, raise_=("builtins", "ValueError", "no such station: 'XYZ'"),
                          timeout=120)
    line = assert_one_error_line(proc, code=3)
    assert re.fullmatch(r"error: task '[\w-]+' failed on worker tcp://127\.0\.0\.1:\d+: "
                        r"ValueError: no such station: 'XYZ' \(at fault_injection\.py:\d+ in "
                        r"raise_like\)", line), line


# --------------------------------------------------------------------------- Python


UUID1 = TWO_GPUS["gpus"][1]["uuid"]
GPUS = tuple(Device(i, g["uuid"], g["name"], g["memory_total"], g["memory_free"],
                    g["pci_bus_id"]) for i, g in enumerate(TWO_GPUS["gpus"]))


@pytest.fixture(scope="module")
def one_worker():
    """One CPU worker; a test may make it look like a dask-cuda worker of GPU 1."""
    with daskgpu.cluster(cpu=True, workers=1, threads_per_worker=1, dashboard=False) as session:
        yield session


def _set_visible(visible, order, dask_worker=None):
    for name, value in (("CUDA_VISIBLE_DEVICES", visible), ("CUDA_DEVICE_ORDER", order)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.mark.parametrize(
    ("visible", "order", "named"),
    [
        # What dask-cuda gives the worker of the second selected GPU: it first, by UUID or by
        # nvidia-smi index in PCI bus order (as daskgpu starts workers).
        (f"{UUID1},{GPUS[0].uuid}", None, f"GPU 1 (NVIDIA H100 80GB HBM3, {UUID1})"),
        ("1,0", "PCI_BUS_ID", f"GPU 1 (NVIDIA H100 80GB HBM3, {UUID1})"),
        # CUDA's own order need not be nvidia-smi's: the index is shown as CUDA's.
        ("1,0", None, "CUDA device 1"),
    ],
    ids=["uuid", "index-in-pci-order", "index-in-cuda-order"],
)
def test_python_gets_a_gpu_error_naming_the_gpu_and_the_worker(one_worker, visible, order,
                                                               named):
    one_worker.client.run(_set_visible, visible, order)
    gpu = Backend("gpu", "cupy", "cudf", GPUS, workers=1, threads=1)
    try:
        with pytest.raises(GPUError) as err:
            daskgpu.run(failing_pipeline(*CUPY_OOM), one_worker, backend=gpu)
    finally:
        one_worker.client.run(_set_visible, None, None)
    (address,) = one_worker.client.scheduler_info()["workers"]
    failed = err.value
    assert failed.exit_code == 3 and isinstance(failed, TaskFailed)
    assert failed.device == (None if named.startswith("CUDA") else GPUS[1])
    assert failed.worker == address and failed.task
    text = str(failed)
    assert text.startswith(f"{named} on worker {address}: out of device memory in task "
                           f"'{failed.task}' (cupy OutOfMemoryError: Out of memory allocating "
                           "1,024 bytes"), text
    assert "chunks=" in text and "--" not in text and "\n" not in text  # Python's spelling
    cause = failed.__cause__  # the worker's own exception, with its traceback
    assert (type(cause).__module__, type(cause).__name__) == ("cupy.cuda.memory",
                                                              "OutOfMemoryError")
    assert cause.__traceback__ is not None


def test_a_gpu_worker_that_cannot_be_asked_is_still_named_as_well_as_known(one_worker):
    gpu = Backend("gpu", "cupy", "cudf", GPUS, workers=1, threads=1)
    with pytest.raises(GPUError) as err:  # no CUDA_VISIBLE_DEVICES on this worker
        daskgpu.run(failing_pipeline(*NUMBA_OOM), one_worker, backend=gpu)
    (address,) = one_worker.client.scheduler_info()["workers"]
    assert str(err.value).startswith(f"a GPU worker ({address}): out of device memory in task ")
    assert err.value.device is None


def _verify_on_the_workers(workload, raw):
    import dask.array as da
    import numpy as np

    blocks = da.from_array(np.ones(10), chunks=5)
    blocks.map_blocks(fault_injection.raise_like, *CUPY_OOM, dtype=float).sum().compute()


def _verify_here(workload, raw):
    raise ValueError("a bug in the check itself")


def test_a_cuda_error_in_the_verification_is_one_line_too(one_worker):
    # The verification computes through Dask, not through the runner's futures.
    (address,) = one_worker.client.scheduler_info()["workers"]
    with pytest.raises(GPUError, match=re.escape(f"worker {address}: out of device memory")):
        daskgpu.run(working_pipeline(_verify_on_the_workers), one_worker)
    # An exception the pipeline's check raised in the client is no task's: it names the hook,
    # and the exception is its cause.
    with pytest.raises(PipelineFailed, match="working-task: its verify raised ValueError: a bug "
                                             "in the check itself") as caught:
        daskgpu.run(working_pipeline(_verify_here), one_worker)
    assert isinstance(caught.value.__cause__, ValueError)


def test_exit_code_3_is_documented():
    from daskgpu.cli import commands as cli

    assert TaskFailed.exit_code == GPUError.exit_code == cli.EXIT_TASK_FAILED == 3
    assert "3 a task failed on a worker" in cli.EXIT_CODES
    readme = " ".join((fault_injection.ROOT / "README.md").read_text().split())
    assert "3 a task failed on a worker (a CUDA error" in readme
