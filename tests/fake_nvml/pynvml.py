"""A stand-in for nvidia-ml-py's ``pynvml`` that reports made-up GPUs, for tests.

Put this directory first on ``sys.path`` (or ``PYTHONPATH`` for a subprocess) and set
``DASKGPU_TEST_NVML`` to a JSON document:

- ``{"error": "LibraryNotFound"}``: ``nvmlInit`` fails like a machine without a driver;
- ``{"gpus": [{"name": ..., "uuid": ..., "memory_total": ..., "memory_free": ...,
  "pci_bus_id": ..., "migs": [{"uuid": ..., "memory_total": ...}, ...]}, ...]}``.

Only the calls daskgpu, dask-cuda and distributed's dashboard and system monitor make are
implemented; a GPU's ``utilization`` (percent, default 37) is reported as its utilisation, and
its ``memory_used_file``, where given, is a file holding the bytes in use (read at each call, so
that a test can vary them; while it does not exist, ``memory_total - memory_free`` are).
``"cpu_affinity": "unsupported"`` at the top level makes ``nvmlDeviceGetCpuAffinity`` fail as it
does in many VMs and containers.
"""

import json
import os
from types import SimpleNamespace

NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_MIG_DISABLE = 0


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_Unknown(NVMLError):
    pass


def _spec():
    return json.loads(os.environ.get("DASKGPU_TEST_NVML", '{"gpus": []}'))


def nvmlInit():
    err = _spec().get("error")
    if err:
        raise globals()[f"NVMLError_{err}"](err)


def nvmlShutdown():
    pass


def _gpus():
    return _spec()["gpus"]


def nvmlDeviceGetCount():
    return len(_gpus())


def nvmlDeviceGetHandleByIndex(index):
    gpus = _gpus()
    if index >= len(gpus):
        raise NVMLError("Invalid Argument")
    return ("gpu", index, None)


def _record(handle):
    kind, index, mig = handle
    gpu = _gpus()[index]
    return gpu if kind == "gpu" else gpu["migs"][mig]


def nvmlDeviceGetName(handle):
    rec = _record(handle)
    return rec.get("name", _gpus()[handle[1]].get("name", "Fake GPU"))


def nvmlDeviceGetUUID(handle):
    return _record(handle)["uuid"]


def nvmlDeviceGetMemoryInfo(handle):
    rec = _record(handle)
    total = rec.get("memory_total", 80 * 2**30)
    free = rec.get("memory_free", total)
    try:
        with open(rec["memory_used_file"]) as f:
            free = total - int(f.read())
    except (KeyError, OSError, ValueError):  # none given, none yet, or being written
        pass
    return SimpleNamespace(total=total, free=free, used=total - free)


def nvmlDeviceGetPciInfo(handle):
    gpu = _gpus()[handle[1]]
    return SimpleNamespace(busId=gpu.get("pci_bus_id", f"00000000:{handle[1] + 1:02X}:00.0"))


def nvmlDeviceGetMigMode(handle):
    gpu = _gpus()[handle[1]]
    if "migs" not in gpu:
        raise NVMLError_NotSupported("Not Supported")
    return (NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE)


def nvmlDeviceGetMaxMigDeviceCount(handle):
    return 7


def nvmlDeviceGetMigDeviceHandleByIndex(handle, slot):
    migs = _gpus()[handle[1]].get("migs", [])
    if slot >= len(migs):
        raise NVMLError_NotFound("Not Found")
    return ("mig", handle[1], slot)


def nvmlSystemGetDriverVersion():
    return "555.42.06"


def nvmlDeviceGetHandleByUUID(uuid):
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for index, gpu in enumerate(_gpus()):
        if gpu["uuid"] == text:
            return ("gpu", index, None)
        for slot, mig in enumerate(gpu.get("migs", [])):
            if mig["uuid"] == text:
                return ("mig", index, slot)
    raise NVMLError_NotFound("Not Found")


def nvmlDeviceIsMigDeviceHandle(handle):
    return handle[0] == "mig"


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle):
    return ("gpu", handle[1], None)


def nvmlDeviceGetCpuAffinity(handle, words):
    if _spec().get("cpu_affinity") == "unsupported":
        raise NVMLError_NotSupported("Not Supported")
    every_cpu = (1 << (os.cpu_count() or 1)) - 1
    return [(every_cpu >> (64 * i)) & (2**64 - 1) for i in range(words)]


def nvmlDeviceGetIndex(handle):
    return handle[1]


def nvmlDeviceGetUtilizationRates(handle):
    return SimpleNamespace(gpu=_gpus()[handle[1]].get("utilization", 37), memory=0)


def nvmlDeviceGetComputeRunningProcesses(handle):
    return []


nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses
