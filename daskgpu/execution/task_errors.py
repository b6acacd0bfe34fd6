"""A task that raised on a worker, told in one line: which task, which worker, which GPU, and why.

A CUDA error above all (out of device memory, a runtime or driver error, a kernel that does not
compile) reaches the client as the library's own exception, pickled on the worker; the client
need not have the library (CuPy, Numba's CUDA driver, RMM) to name it, so classes are matched by
module and name. The scheduler says which task raised and on which worker; the worker says which
device it computes on (its ``CUDA_VISIBLE_DEVICES``), and the run's devices say what that is.
Every such exception becomes one :class:`~daskgpu.errors.TaskFailed` (:class:`GPUError` for a
CUDA error), the worker's exception its cause.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import traceback
from collections.abc import Iterator

import dask.utils

from daskgpu.errors import DaskGPUError, GPUError, TaskFailed

ASK_WORKER_S = 5.0  # how long to wait for a worker to say which GPU it has
_MESSAGE_CHARS = 300  # of the exception's message, in the one line

_OUT_OF_MEMORY = ("out of device memory", "use smaller blocks (--chunks, or more --partitions) "
                  "or a smaller problem, and check with nvidia-smi that no other process holds "
                  "memory on that GPU")
_CUDA_ERROR = ("CUDA error", "check the GPU with nvidia-smi (and the driver's messages, dmesg); "
               "run again once it is healthy")
_COMPILE_ERROR = ("a kernel did not compile", "a bug in the kernel, or a Numba/CUDA version it "
                  "does not support")
_NO_CUDA = ("CUDA is not usable on the worker", "check the driver with nvidia-smi on that machine")

# (libraries, class names, what it means); libraries by the first part of the class's module.
_CUDA_CLASSES = (
    (("cupy", "cupy_backends", "cupyx"), {"OutOfMemoryError"}, _OUT_OF_MEMORY),
    (("cupy", "cupy_backends", "cupyx"), {"CompileException"}, _COMPILE_ERROR),
    (("cupy", "cupy_backends", "cupyx"), {"CUDARuntimeError", "CUDADriverError", "CUBLASError",
                                          "CUFFTError", "CURANDError", "CUSOLVERError",
                                          "CUSPARSEError", "NCCLError"}, _CUDA_ERROR),
    (("numba", "numba_cuda"), {"CudaAPIError", "CudaDriverError", "CudaRuntimeError"},
     _CUDA_ERROR),
    (("numba", "numba_cuda"), {"CudaSupportError"}, _NO_CUDA),
    (("numba", "numba_cuda"), {"NvvmError", "NvvmSupportError", "NvrtcError",
                               "NvrtcCompilationError", "NvrtcSupportError", "LinkerError"},
     _COMPILE_ERROR),
    (("rmm",), {"RMMError", "MemoryError", "OutOfMemoryError"}, _OUT_OF_MEMORY),
)
_NUMBA_COMPILE = {"TypingError", "LoweringError"}  # a CUDA kernel, or its CPU twin
_OOM_TEXT = re.compile(r"out_of_memory|bad_alloc|RMM failure|CUDA_ERROR_OUT_OF_MEMORY|"
                       r"cudaErrorMemoryAllocation", re.IGNORECASE)


def cuda_error_kind(exc: BaseException) -> tuple[str, str] | None:
    """What a CUDA library's exception means, and what to do, or None for any other exception.

    Matched by the class's module and name (the classes come back pickled from the workers; the
    client need not have the libraries) and, for memory, the message.

    >>> cuda_error_kind(MemoryError("std::bad_alloc: out_of_memory: RMM failure at: arena.hpp"))[0]
    'out of device memory'
    >>> cuda_error_kind(MemoryError()) is None  # the host's own
    True
    """
    cls = type(exc)
    library, name, text = cls.__module__.split(".")[0], cls.__name__, str(exc)
    if cls is MemoryError:  # cuDF's and RMM's std::bad_alloc; the host's own has no such text
        return _OUT_OF_MEMORY if _OOM_TEXT.search(text) else None
    if library in ("numba", "numba_cuda") and name in _NUMBA_COMPILE:
        return _COMPILE_ERROR
    for libraries, names, kind in _CUDA_CLASSES:
        if library in libraries and name in names:
            return _OUT_OF_MEMORY if kind is _CUDA_ERROR and _OOM_TEXT.search(text) else kind
    return None


def _erred_task(client, key, text: str) -> tuple[str, str | None] | None:
    """``(task name, worker address)`` of the task that raised ``text``, as the scheduler saw it.

    By the key of a failed future (the task it blames), or else by the exception's text among
    the scheduler's recent erred tasks (distributed.diagnostics.erred-tasks.max-history). None
    when the scheduler knows no such task: the exception was not a task's.
    """

    # Nested, so that it travels by value: an existing scheduler need not have daskgpu.
    def find(key, text, dask_scheduler=None):
        state = dask_scheduler.tasks.get(key) if key is not None else None
        blame = getattr(state, "exception_blame", None)
        if blame is not None:
            return blame.key, sorted(blame.erred_on or ())
        for erred in getattr(dask_scheduler, "erred_tasks", ()):
            if erred.erred_on and erred.exception_text == text:
                return erred.key, sorted(erred.erred_on)
        return None

    try:
        found = client.run_on_scheduler(find, key, text)
    except Exception:  # an old or unreachable scheduler: nothing known
        return None
    if found is None:
        return None
    task, workers = found
    return dask.utils.key_split(task), (workers[0] if workers else None)


def _within(seconds: float, function, *args):
    """``function(*args)``, or None if it raises or takes longer than ``seconds``."""
    answer: list = []

    def call() -> None:
        with contextlib.suppress(Exception):
            answer.append(function(*args))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    return answer[0] if answer else None


def _worker_gpu(client, address: str, devices) -> tuple[object, str | None]:
    """The run's device a worker computes on; else None and how the worker names its device.

    A GPU worker (dask-cuda's) computes on the first device of its CUDA_VISIBLE_DEVICES: a UUID,
    or an index, which is nvidia-smi's (a Device's) only in PCI bus order.
    """

    def visible():
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER")

    answers = _within(ASK_WORKER_S, lambda: client.run(visible, workers=[address],
                                                         on_error="return"))
    answer = answers.get(address) if isinstance(answers, dict) else None
    if not isinstance(answer, tuple) or not answer[0] or not answer[0].strip():
        return None, None
    first, order = answer[0].split(",")[0].strip(), answer[1]
    for device in devices:
        if first == device.uuid or (first == str(device.index) and order == "PCI_BUS_ID"
                                    and device.mig_index is None):
            return device, first
    return None, (f"CUDA device {first}" if first.isdigit() else f"GPU {first}")


def _raised_at(exc: BaseException) -> str:
    """`` (at FILE:LINE in FUNCTION)`` of the innermost frame outside installed packages."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if "-packages" + os.sep not in f.filename]
    frame = (own or frames or [None])[-1]
    if frame is None:
        return ""
    return f" (at {os.path.basename(frame.filename)}:{frame.lineno} in {frame.name})"


def _described(exc: BaseException) -> str:
    """``library Class: message``, the message cut to one line of a few hundred characters."""
    cls = type(exc)
    library = cls.__module__.split(".")[0].replace("_backends", "").replace("numba_cuda", "numba")
    prefix = "" if library == "builtins" else f"{library} "
    text = " ".join(str(exc).split()).rstrip(".")
    if len(text) > _MESSAGE_CHARS:
        text = text[:_MESSAGE_CHARS - 3] + "..."
    return f"{prefix}{cls.__name__}: {text}" if text else f"{prefix}{cls.__name__}"


def _where(address: str | None, device, visible: str | None, gpu_run: bool) -> str:
    """Where a task failed: its GPU and worker, as far as known."""
    if device is not None:
        return f"GPU {device.label} ({device.name}, {device.uuid}) on worker {address}"
    if visible is not None:
        return f"{visible} on worker {address}"
    worker = "a GPU worker" if gpu_run else "worker"
    if address:
        return f"{worker} ({address})" if gpu_run else f"{worker} {address}"
    return worker if gpu_run else "a worker"


def task_failure(client, exc: BaseException, devices=(), key=None,
                 from_task: bool = False) -> TaskFailed | None:
    """The one-line failure for an exception a task raised on a worker, else None.

    Parameters
    ----------
    client : distributed.Client
    exc : BaseException
        What the client received.
    devices : tuple of Device
        The run's GPUs (none on CPU), to name the one the worker computes on.
    key : optional
        The key of the failed future ``exc`` came from, where known.
    from_task : bool
        ``exc`` surely came from a task, even if the scheduler cannot say which.

    Returns
    -------
    TaskFailed or None
        A :class:`GPUError` for a CUDA error; None for an exception that is no task's, or that
        is already one line (a :class:`DaskGPUError`).
    """
    if isinstance(exc, DaskGPUError) or not isinstance(exc, Exception):
        return None
    erred = _erred_task(client, key, repr(exc))
    if erred is None and not from_task:
        return None
    task, address = erred if erred is not None else (None, None)
    kind = cuda_error_kind(exc)
    # A Numba typing error on CPU workers comes from a kernel's CPU twin: no GPU involved.
    gpu = kind is not None and (bool(devices) or type(exc).__name__ not in _NUMBA_COMPILE)
    device = visible = None
    if address and (gpu or devices):
        device, visible = _worker_gpu(client, address, devices)
    where = _where(address, device, visible, bool(devices))
    in_task = f" in task {task!r}" if task else ""
    if kind is not None:
        what, hint = kind
        message = f"{where}: {what}{in_task} ({_described(exc)}); {hint}"
    else:
        message = (f"task {task!r} failed on {where}" if task else f"a task failed on {where}")
        message += f": {_described(exc)}{_raised_at(exc)}"
    failed = (GPUError if gpu else TaskFailed)(message)
    failed.task, failed.worker, failed.device = task, address, device
    return failed


@contextlib.contextmanager
def explained(client, devices=()) -> Iterator[None]:
    """Around a run's work on ``client``: a task's exception becomes one :class:`TaskFailed`.

    Covers what :func:`daskgpu.execution.faults.results` does not wait for: a pipeline's preparatory
    passes and its verification, computed on the cluster by Dask.

    Raises
    ------
    TaskFailed
        With the worker's exception as its cause; a :class:`GPUError` for a CUDA error.
    """
    try:
        yield
    except Exception as exc:
        failed = task_failure(client, exc, devices)
        if failed is None:
            raise
        raise failed from exc
