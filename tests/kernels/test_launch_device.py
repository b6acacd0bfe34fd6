"""How a kernel family launches on device data (daskgpu.kernels.launch), on CPU: CuPy arrays
from the strict CuPy stand-in, Numba's CUDA calls recorded instead of made.

What this shows: a CuPy array is launched on CuPy's current stream (whichever it is at the
launch) and imported without a host wait; any other device array keeps numba-cuda's wait and
the default stream; a Numba array is used as it is. What it cannot show: the streams themselves
(tests/test_gpu.py runs the same on a GPU).
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from numba import cuda

from daskgpu.kernels import launch


@pytest.fixture
def numba_calls(monkeypatch):
    """``(function, arguments)`` of each Numba CUDA call ``launch`` makes, none made."""
    seen: list[tuple] = []

    def external_stream(ptr):
        seen.append(("external_stream", ptr))
        return ("stream at", ptr)

    def default_stream():
        seen.append(("default_stream",))
        return "default stream"

    def as_cuda_array(obj, sync=True):
        seen.append(("as_cuda_array", obj, sync))
        return ("numba view of", obj)

    for name, function in (("external_stream", external_stream),
                           ("default_stream", default_stream),
                           ("as_cuda_array", as_cuda_array)):
        monkeypatch.setattr(cuda, name, function)
    return seen


class ForeignDeviceArray:
    """A device array of another library (neither CuPy's nor Numba's)."""

    __module__ = "torch"
    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "data": (0xBEEF, False),
                                "version": 3}


def test_a_cupy_array_launches_on_cupys_current_stream(cupy_stand_in, numba_calls):
    x = cupy_stand_in.zeros(4)
    streams = iter([0xA0, 0xB0])  # the current stream changes between two launches
    cupy_stand_in.cuda.get_current_stream = lambda: types.SimpleNamespace(ptr=next(streams))
    assert launch.stream_for(x) == ("stream at", 0xA0)
    assert launch.stream_for(x) == ("stream at", 0xB0)
    assert numba_calls == [("external_stream", 0xA0), ("external_stream", 0xB0)]


def test_other_arrays_launch_on_the_default_stream(cupy_stand_in, numba_calls):
    for x in (ForeignDeviceArray(), np.zeros(3)):
        assert launch.stream_for(x) == "default stream"
    assert numba_calls == [("default_stream",), ("default_stream",)]


def test_a_cupy_array_is_imported_without_a_host_wait_a_foreign_one_with(cupy_stand_in,
                                                                        numba_calls):
    x, foreign = cupy_stand_in.ones((2, 3), np.float32), ForeignDeviceArray()
    assert launch.to_numba(x) == ("numba view of", x)
    assert launch.to_numba(foreign) == ("numba view of", foreign)
    assert numba_calls == [("as_cuda_array", x, False), ("as_cuda_array", foreign, True)]


def test_a_numba_device_array_is_launched_as_it_is(numba_calls):
    class NumbaDeviceArray:
        def copy_to_host(self):
            raise AssertionError("not copied")

    x = NumbaDeviceArray()
    assert launch.to_numba(x) is x
    assert numba_calls == []


def test_a_cupy_array_gets_zeroed_cupy_arrays_alike(cupy_stand_in):
    made = launch.like(cupy_stand_in.ones(5), (2, 3), np.int64)
    assert isinstance(made, cupy_stand_in.ndarray)
    assert made.shape == (2, 3) and made.dtype == np.int64 and not made.get().any()
    assert launch.is_cupy(made) and not launch.on_host(made)
