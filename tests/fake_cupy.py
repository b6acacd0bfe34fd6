"""CuPy as daskgpu's kernels see it, for Numba's CUDA simulator (which must already be enabled).

CuPy needs a GPU and is not installed where the tests run, and the simulator has neither
``cuda.as_cuda_array`` nor external streams. ``install()`` registers a module named ``cupy``
whose arrays are routed as CuPy's (their class lives in a ``cupy`` module) and hold a simulator
device array, and gives ``numba.cuda`` the two missing functions, both recording their calls.
The kernels then run for real in the simulator on the held arrays, while a test sees what a
GPU run cannot show without a profiler: which arrays were imported into Numba and whether the
import would synchronise the host (``conversions``), which arrays CuPy allocated
(``allocations``), and which stream the kernels were handed (``streams``).

What it cannot show: CuPy's and numba-cuda's real behaviour (pool, streams, the driver).
"""

from __future__ import annotations

import pathlib
import sys
import types

import numpy as np

#: Prepend to a ``run_in_simulator`` script (written without indentation) to install the fake.
SETUP = f"""
import sys
sys.path.insert(0, {str(pathlib.Path(__file__).resolve().parent)!r})
import fake_cupy
fake_cupy.install()
"""
#: What CuPy's current stream reports as its pointer (any non-zero value, as for a real stream).
STREAM_PTR = 0x5EED
#: ``(array, sync)`` for each ``numba.cuda.as_cuda_array`` call.
conversions: list[tuple[object, bool]] = []
#: Each array created through the fake module (``zeros``, ``asarray``, ``ravel`` copies).
allocations: list[ndarray] = []
#: ``(ptr, stream)`` for each ``numba.cuda.external_stream`` call.
streams: list[tuple[int, object]] = []

_to_device = None  # the simulator's own, kept for the fake module when a test replaces it


class ndarray:  # noqa: N801 - CuPy's name
    """A device array typed as CuPy's, holding a simulator device array."""

    def __init__(self, device_array):
        self._device = device_array
        self.shape = tuple(device_array.shape)
        self.dtype = np.dtype(device_array.dtype)
        self.ndim = len(self.shape)
        self.size = int(np.prod(self.shape))
        allocations.append(self)

    @property
    def __cuda_array_interface__(self):
        host = self._device._ary
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (host.__array_interface__["data"][0], False),
            "strides": host.strides,
            "version": 3,
            "stream": STREAM_PTR,  # CuPy reports its current stream
        }

    def __getitem__(self, key):
        """Elements as CuPy's indexing gives them: a view for a slice (no allocation)."""
        part = self._device[key]
        if not hasattr(part, "copy_to_host"):
            return part
        view = ndarray.__new__(ndarray)
        view._device, view.shape, view.dtype = part, tuple(part.shape), np.dtype(part.dtype)
        view.ndim, view.size = len(view.shape), int(np.prod(view.shape))
        return view

    def ravel(self):
        """A 1-D copy (CuPy returns a view where it can; a copy is as good for the kernels)."""
        return ndarray(_to_device(np.ascontiguousarray(self.get()).ravel()))

    def __array__(self, *args, **kwargs):
        """Refused, as by CuPy: a host copy is made only by ``get()``."""
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly.")

    def get(self):
        """The values, on the host."""
        return self._device.copy_to_host()


ndarray.__module__ = "cupy._core.core"


def zeros(shape, dtype=float):
    """A new zeroed array, from "CuPy's pool"."""
    return ndarray(_to_device(np.zeros(shape, dtype)))


def asarray(a):
    """A device copy of the host array ``a``, from "CuPy's pool"."""
    return ndarray(_to_device(np.asarray(a)))


def _as_cuda_array(obj, sync=True):
    conversions.append((obj, sync))
    return obj._device


def install() -> types.ModuleType:
    """Register the fake ``cupy`` and the two ``numba.cuda`` functions; return the fake."""
    global _to_device
    import numba
    from numba import cuda

    assert numba.config.ENABLE_CUDASIM, "set NUMBA_ENABLE_CUDASIM=1 before numba is imported"
    _to_device = cuda.to_device
    module = sys.modules[__name__]
    cupy = types.ModuleType("cupy")
    cupy.ndarray, cupy.zeros, cupy.asarray = ndarray, zeros, asarray
    current = types.SimpleNamespace(ptr=STREAM_PTR)
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda: current)
    sys.modules["cupy"] = cupy

    def external_stream(ptr):
        stream = cuda.stream()
        streams.append((ptr, stream))
        return stream

    cuda.as_cuda_array = _as_cuda_array
    cuda.external_stream = external_stream
    return module


#: ``(kernel name, launch configuration, arguments)`` for each launch of a recorded kernel.
launches: list[tuple[str, tuple, tuple]] = []


class _Recorded:
    def __init__(self, kernel, name):
        self.kernel, self.name = kernel, name

    def __getitem__(self, config):
        configured = self.kernel[config]

        def launch(*args):
            given = [type(a).__name__ for a in args if isinstance(a, ndarray)]
            assert not given, (f"{self.name} was handed CuPy arrays to import at the launch "
                               f"(arguments of type {given}), not Numba views")
            launches.append((self.name, config, args))
            return configured(*args)

        return launch


def record(module, *names) -> None:
    """Record each launch of the kernels ``names`` (attributes of ``module``) in ``launches``."""
    for name in names:
        setattr(module, name, _Recorded(getattr(module, name), name))


def assert_launched_on_cupy_stream() -> None:
    """Every recorded launch went to the stream made from CuPy's current stream pointer."""
    cupy_streams = [s for ptr, s in streams if ptr == STREAM_PTR]
    assert launches, "no kernel was launched"
    for name, config, _ in launches:
        assert len(config) >= 3 and any(config[2] is s for s in cupy_streams), (name, config)
