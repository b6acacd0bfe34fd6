"""Which GPUs are here, and which of them a ``--gpus`` selection means.

Everything here reads NVML (nvidia-ml-py) only: the client process never creates a CUDA
context. Indices follow nvidia-smi (NVML enumerates in PCI bus order). Where
``CUDA_VISIBLE_DEVICES`` is already set, indices are positions in that list, as CUDA counts
them, and devices outside it cannot be chosen.

One job, a little over the house's usual module size: the inventory and the selection rules
(indices, ranges, UUIDs and their prefixes, MIG instances, a pre-set ``CUDA_VISIBLE_DEVICES``)
share the same records and error wording, and splitting them would split each rule in two.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass, field

from daskgpu.errors import DeviceSelectionError

_UUID_PREFIXES = ("GPU-", "MIG-")
_RANGE = re.compile(r"^(\d+)-(\d+)$")
_MAX_INDEX_DIGITS = 6
_SYNTAX_HELP = "use indices (0,1), a range (0-3), GPU-/MIG- UUIDs, or 'all'"


@dataclass(frozen=True)
class Device:
    """One GPU, or one MIG instance of a GPU, as NVML reports it.

    Attributes
    ----------
    index : int
        nvidia-smi index of the GPU (of the parent GPU for a MIG instance).
    uuid : str
        ``GPU-…`` or ``MIG-…`` UUID: how workers are handed their device.
    name : str
        Product name.
    memory_total, memory_free : int
        Device memory in bytes.
    pci_bus_id : str
        PCI bus id of the GPU (of the parent GPU for a MIG instance).
    mig_index : int or None
        Position of a MIG instance on its GPU; None for a whole GPU.
    migs : tuple of Device
        MIG instances of a GPU in MIG mode.
    """

    index: int
    uuid: str
    name: str
    memory_total: int
    memory_free: int
    pci_bus_id: str
    mig_index: int | None = None
    migs: tuple[Device, ...] = field(default=())

    @property
    def label(self) -> str:
        """Short name: ``0`` for a GPU, ``0/mig1`` for a MIG instance."""
        if self.mig_index is None:
            return str(self.index)
        return f"{self.index}/mig{self.mig_index}"

    def as_dict(self) -> dict:
        """JSON-ready description."""
        out = {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_total": self.memory_total,
            "memory_free": self.memory_free,
            "pci_bus_id": self.pci_bus_id,
        }
        if self.mig_index is not None:
            out["mig_index"] = self.mig_index
        if self.migs:
            out["migs"] = [m.as_dict() for m in self.migs]
        return out


@dataclass(frozen=True)
class Inventory:
    """The GPUs NVML reports, or why there are none.

    Attributes
    ----------
    devices : tuple of Device
        Whole GPUs in nvidia-smi order.
    reason : str or None
        Why no GPU was found (NVML library missing, driver error, ...); None when some were.
    """

    devices: tuple[Device, ...]
    reason: str | None = None

    def all_devices(self) -> list[Device]:
        """Whole GPUs and their MIG instances."""
        out = []
        for dev in self.devices:
            out.append(dev)
            out.extend(dev.migs)
        return out


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read_device(nvml, handle, index: int, mig_index: int | None, pci: str) -> Device:
    mem = nvml.nvmlDeviceGetMemoryInfo(handle)
    return Device(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_total=int(mem.total),
        memory_free=int(mem.free),
        pci_bus_id=pci,
        mig_index=mig_index,
    )


def _read_migs(nvml, handle, index: int, pci: str) -> tuple[Device, ...]:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return ()  # GPU without MIG support
    if current != nvml.NVML_DEVICE_MIG_ENABLE:
        return ()
    migs = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError:
            continue  # empty slot
        migs.append(_read_device(nvml, mig, index, len(migs), pci))
    return tuple(migs)


def _nvml_failure_reason(nvml, exc: Exception) -> str:
    named = {
        "NVMLError_LibraryNotFound": "NVML library not found (no NVIDIA driver installed)",
        "NVMLError_DriverNotLoaded": "NVIDIA driver not loaded",
        "NVMLError_NoPermission": "no permission to query the NVIDIA driver",
        "NVMLError_LibRmVersionMismatch": "NVIDIA driver/library version mismatch (reboot?)",
    }
    for cls_name, text in named.items():
        cls = getattr(nvml, cls_name, None)
        if cls is not None and isinstance(exc, cls):
            return text
    return f"NVML error: {exc}"


#: The CUDA driver library, as the CUDA runtime (and so CuPy and Numba) loads it.
CUDA_DRIVER_LIBRARIES = {"win32": ("nvcuda.dll",)}.get(sys.platform, ("libcuda.so.1",))
#: How to give a container the CUDA driver, where NVML (the "utility" capability) is there.
CUDA_DRIVER_FIX = ("in a container, start it with NVIDIA_DRIVER_CAPABILITIES=compute,utility "
                   "(the NVIDIA container runtime then mounts libcuda), or run with --cpu")


def cuda_driver_problem() -> str | None:
    """Why the CUDA driver library cannot be loaded here, or None where it can.

    NVML (``libnvidia-ml``) can see GPUs where the CUDA driver library (``libcuda``) is
    missing: a container started with ``NVIDIA_DRIVER_CAPABILITIES=utility`` has the first
    and not the second, and every worker would then fail to create its CUDA context. Only
    the library is loaded (``dlopen``): no CUDA call is made and no context created.
    """
    reasons = []
    for name in CUDA_DRIVER_LIBRARIES:
        try:
            ctypes.CDLL(name)
            return None
        except OSError as exc:
            reasons.append(str(exc) or name)
    return "; ".join(reasons)


def inventory() -> Inventory:
    """Read the GPUs (and MIG instances) NVML reports, in nvidia-smi order.

    Returns
    -------
    Inventory
        With ``reason`` set, and no devices, where NVML cannot be used or finds no GPU.
    """
    try:
        import pynvml as nvml
    except ImportError:
        return Inventory((), "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return Inventory((), _nvml_failure_reason(nvml, exc))
    try:
        devices = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            pci = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            dev = _read_device(nvml, handle, index, None, pci)
            devices.append(Device(**{**dev.__dict__, "migs": _read_migs(nvml, handle, index, pci)}))
    except nvml.NVMLError as exc:
        return Inventory((), _nvml_failure_reason(nvml, exc))
    finally:
        nvml.nvmlShutdown()
    if not devices:
        return Inventory((), "the NVIDIA driver reports no GPU")
    return Inventory(tuple(devices))


def parse_selection(text: str) -> list[int | str | tuple[int, int]]:
    """Parse the syntax of a ``--gpus`` value, without looking at any device.

    Returns a list of items: ``"all"``, ints, ``(first, last)`` ranges and UUID strings.

    >>> parse_selection("0,2-3,GPU-1a2b")
    [0, (2, 3), 'GPU-1a2b']
    >>> parse_selection("all")
    ['all']
    >>> parse_selection("3-1")
    Traceback (most recent call last):
    ...
    daskgpu.errors.DeviceSelectionError: --gpus: range '3-1' runs backwards; write 1-3
    """
    if text is None or not text.strip():
        raise DeviceSelectionError(f"--gpus is empty; {_SYNTAX_HELP}")
    text = text.strip()
    if text.lower() == "all":
        return ["all"]
    items: list[int | str | tuple[int, int]] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            raise DeviceSelectionError(f"--gpus: empty item in {text!r}; {_SYNTAX_HELP}")
        if item.upper().startswith(_UUID_PREFIXES):
            if len(item) <= 4:
                raise DeviceSelectionError(f"--gpus: {item!r} is an incomplete UUID")
            items.append(item[:4].upper() + item[4:])
        elif item.isdecimal():
            items.append(_index(item))
        elif (match := _RANGE.match(item)) is not None:
            first, last = _index(match[1]), _index(match[2])
            if first > last:
                raise DeviceSelectionError(
                    f"--gpus: range {item!r} runs backwards; write {last}-{first}"
                )
            items.append((first, last))
        elif item.startswith("-") and item[1:].isdigit():
            raise DeviceSelectionError(
                f"--gpus: {item!r} is not a GPU index (indices start at 0); {_SYNTAX_HELP}"
            )
        elif item.lower() == "all":
            raise DeviceSelectionError("--gpus: 'all' cannot be combined with other devices")
        else:
            raise DeviceSelectionError(
                f"--gpus: {item!r} is not a GPU index, range or UUID; {_SYNTAX_HELP}"
            )
    return items


def _index(digits: str) -> int:
    if len(digits) > _MAX_INDEX_DIGITS:
        raise DeviceSelectionError(f"--gpus: GPU index {digits[:12]}... is too large")
    return int(digits)


def _match_uuid(prefix: str, candidates: list[Device]) -> Device | None:
    """The device whose UUID is, or starts with, ``prefix`` (CUDA accepts unique prefixes)."""
    key = prefix.lower()
    exact = [d for d in candidates if d.uuid.lower() == key]
    if exact:
        return exact[0]
    starts = [d for d in candidates if d.uuid.lower().startswith(key)]
    if len(starts) > 1:
        raise DeviceSelectionError(
            f"--gpus: {prefix!r} matches {len(starts)} devices; give more of the UUID"
        )
    return starts[0] if starts else None


def visible_devices(inv: Inventory, cuda_visible: str | None) -> list[Device]:
    """The devices CUDA would enumerate, in CUDA's order.

    Parameters
    ----------
    inv : Inventory
        What NVML reports.
    cuda_visible : str or None
        The value of ``CUDA_VISIBLE_DEVICES`` (None: unset, every GPU is visible).

    Notes
    -----
    Like CUDA, entries are indices or (prefixes of) UUIDs, and enumeration stops at the first
    entry that names no device.
    """
    if cuda_visible is None:
        return list(inv.devices)
    pool = inv.all_devices()
    out: list[Device] = []
    for raw in cuda_visible.split(","):
        entry = raw.strip()
        if entry.isdecimal() and len(entry) <= _MAX_INDEX_DIGITS and int(entry) < len(inv.devices):
            dev = inv.devices[int(entry)]
        elif entry.upper().startswith(_UUID_PREFIXES):
            try:
                dev = _match_uuid(entry, pool)
            except DeviceSelectionError:
                dev = None
        else:
            dev = None
        if dev is None or dev in out:
            break
        out.append(dev)
    return out


def _describe(devices: list[Device]) -> str:
    if not devices:
        return "none"
    return ", ".join(f"{i}: {d.name} {d.uuid}" for i, d in enumerate(devices))


def select(
    text: str,
    inv: Inventory | None = None,
    cuda_visible: str | None = None,
    *,
    use_environment: bool = True,
) -> list[Device]:
    """Resolve a ``--gpus`` selection to devices.

    Parameters
    ----------
    text : str
        ``all``, ``0,1``, ``0-3``, ``GPU-<uuid>``, ``MIG-<uuid>``, or a comma list of these.
    inv : Inventory, optional
        Devices to choose from; read from NVML when omitted.
    cuda_visible : str, optional
        ``CUDA_VISIBLE_DEVICES`` to honour; read from the environment when omitted and
        ``use_environment`` is true.

    Returns
    -------
    list of Device
        In the order given, each device once.

    Raises
    ------
    DeviceSelectionError
        One line naming what is wrong and what is available.
    """
    items = parse_selection(text)
    inv = inventory() if inv is None else inv
    if cuda_visible is None and use_environment:
        cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not inv.devices:
        raise DeviceSelectionError(
            f"--gpus {text!r}: no GPU found ({inv.reason}); use --cpu to run on CPU workers"
        )
    visible = visible_devices(inv, cuda_visible)
    scope = (
        f"CUDA_VISIBLE_DEVICES={cuda_visible} leaves {len(visible)} GPU(s) visible"
        if cuda_visible is not None
        else f"this machine has {len(visible)} GPU(s)"
    )
    if not visible:
        raise DeviceSelectionError(
            f"--gpus {text!r}: CUDA_VISIBLE_DEVICES={cuda_visible!r} hides every GPU; "
            "unset it or list GPUs in it"
        )
    chosen: list[Device] = []
    for item in items:
        if item == "all":
            picks = visible
        elif isinstance(item, int):
            picks = [_by_position(item, visible, scope)]
        elif isinstance(item, tuple):
            picks = [_by_position(i, visible, scope) for i in range(item[0], item[1] + 1)]
        else:
            picks = [_by_uuid(item, inv, visible, cuda_visible)]
        for dev in picks:
            if dev in chosen:
                raise DeviceSelectionError(
                    f"--gpus {text!r}: device {visible.index(dev) if dev in visible else dev.uuid}"
                    f" ({dev.uuid}) is selected twice"
                )
            chosen.append(dev)
    return chosen


def _by_position(position: int, visible: list[Device], scope: str) -> Device:
    if position >= len(visible):
        raise DeviceSelectionError(
            f"--gpus: GPU index {position} is out of range; {scope} "
            f"(valid: 0-{len(visible) - 1}): {_describe(visible)}"
        )
    return visible[position]


def _by_uuid(uuid: str, inv: Inventory, visible: list[Device], cuda_visible: str | None) -> Device:
    dev = _match_uuid(uuid, inv.all_devices())
    if dev is None:
        raise DeviceSelectionError(
            f"--gpus: no device has UUID {uuid!r}; available: {_describe(inv.all_devices())}"
        )
    allowed = visible + [m for v in visible for m in v.migs]
    if dev not in allowed:
        raise DeviceSelectionError(
            f"--gpus: {dev.uuid} is outside CUDA_VISIBLE_DEVICES={cuda_visible}; "
            f"visible: {_describe(visible)}"
        )
    return dev
