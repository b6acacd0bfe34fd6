"""The strict CuPy stand-in (tests/strict_cupy.py) refuses what CuPy refuses."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import strict_cupy

from daskgpu.kernels import launch
from daskgpu.toolkit import backends


@pytest.fixture
def cupy(cupy_stand_in):
    return cupy_stand_in


def test_implicit_host_conversion_is_refused(cupy):
    x = cupy.asarray(np.arange(6.0).reshape(2, 3))
    for convert in (np.asarray, np.array, lambda a: np.testing.assert_array_equal(a, a)):
        with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
            convert(x)
    np.testing.assert_array_equal(x.get(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(cupy.asnumpy(x), x.get())
    assert float(x[1, 2]) == 5.0 and x[0, 1].item() == 1.0 and x.tolist()[1] == [3.0, 4.0, 5.0]


@pytest.mark.parametrize("mixed", [
    lambda x, h: x + h, lambda x, h: h * x, lambda x, h: x @ h.T, lambda x, h: np.add(x, h),
    lambda x, h: x.__iadd__(h), lambda x, h: x + h[0, 0:1].reshape(()),
    lambda x, h: np.concatenate([x, h]), lambda x, h: x.dot(h.T),
], ids=["add", "rmul", "matmul", "ufunc", "iadd", "0-d", "concatenate", "dot"])
def test_numpy_operands_are_refused(cupy, mixed):
    x, host = cupy.zeros((2, 3)), np.ones((2, 3))
    with pytest.raises(TypeError, match="Unsupported type"):
        mixed(x, host)


def test_scalars_host_edges_and_host_indices_are_taken(cupy):
    x = cupy.asarray(np.arange(6.0))
    np.testing.assert_array_equal((x * 2 + np.float32(1) - 0.5).get(), np.arange(6.0) * 2 + 0.5)
    np.testing.assert_array_equal(x[np.array([4, 1])].get(), [4.0, 1.0])
    counts, edges = cupy.histogram(x, bins=np.linspace(0, 6, 4))
    assert isinstance(edges, cupy.ndarray) and counts.get().tolist() == [2, 2, 2]
    x[np.array([0])] = np.array([9.0])  # advanced: CuPy copies the values in
    x[1] = 7  # a scalar fills
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray"):
        x[2:4] = np.array([1.0, 2.0])
    assert x.get().tolist()[:2] == [9.0, 7.0]


def test_reductions_and_scalar_indices_give_zero_dimensional_device_arrays(cupy):
    x = cupy.asarray(np.arange(6.0).reshape(2, 3))
    for reduced in (x.sum(), x.mean(), x.max(), cupy.argmin(x), x[1, 1], x[0] @ x[1],
                    np.sum(x), cupy.linalg.norm(x), np.linalg.norm(x)):
        assert isinstance(reduced, cupy.ndarray) and reduced.ndim == 0
    assert backends.to_host(x.sum()) == 15.0 and isinstance(backends.to_host(x.sum()), float)
    assert isinstance(np.fft.fft(x), cupy.ndarray)  # NumPy's functions dispatch, as to CuPy
    with pytest.raises(TypeError):
        np.polyfit(x[0], x[1], 1)  # one CuPy lacks


def test_it_is_device_data_to_the_library(cupy):
    x = cupy.zeros(3)
    assert not launch.on_host(x) and launch.is_cupy(x)
    assert isinstance(backends.to_host(x), np.ndarray)
    assert type(x).__module__.split(".")[0] == "cupy"
    with pytest.raises(AttributeError):
        cupy.polyfit  # noqa: B018 - only what the branches under test call


def test_the_generator_takes_an_integer_seed_and_draws_device_arrays(cupy):
    drawn = cupy.random.default_rng(7).standard_normal((2, 2), dtype=np.float32)
    assert isinstance(drawn, cupy.ndarray) and drawn.dtype == np.float32 and cupy.seeds == [7]
    with pytest.raises(TypeError, match="integer"):
        cupy.random.default_rng(np.random.SeedSequence(7))


def test_the_generator_has_cupys_state_layout(cupy):
    """As CuPy's cuRAND generators: a seed cut to 32 bits, element i of a draw from state
    i mod S, each state advancing by the values it gave."""
    a, b = (int(np.random.SeedSequence(0, spawn_key=(k,)).generate_state(1, np.uint64)[0])
            for k in (1379, 28496))  # two 64-bit seeds with the same first 32-bit word
    assert a != b
    assert (cupy.random.default_rng(a).random(50).get()
            == cupy.random.default_rng(b).random(50).get()).all()
    assert cupy.generator_states == 8 * 256 * 16  # cudaDevAttrMultiProcessorCount's value
    cupy.generator_states = 4
    whole = cupy.random.default_rng(5).random(10).get()
    rng = cupy.random.default_rng(5)
    first, second = rng.random(3).get(), rng.random(7).get()
    assert (first == whole[:3]).all()
    assert (second[:4] == whole[[4, 5, 6, 3]]).all()  # states 0-2 on their second values
    assert len(set(whole.tolist())) == 10


def test_a_host_kernel_takes_device_arrays_in_place_and_refuses_a_mixture(cupy):
    def twin(u, scratch):
        scratch[:] = u + 1
        return scratch, u.sum()

    kernel = strict_cupy.host_kernel(twin, device=(0, 1))
    u, scratch = cupy.zeros(3), cupy.zeros(3)
    result, total = kernel(u, scratch)
    assert result is scratch and scratch.get().tolist() == [1.0] * 3
    assert isinstance(total, cupy.ndarray) and total.ndim == 0
    assert kernel(np.zeros(3), np.zeros(3))[0].tolist() == [1.0] * 3  # host data: the twin
    with pytest.raises(TypeError, match="a device array expected"):
        kernel(u, np.zeros(3))


def test_cudf_frames_reach_the_host_only_through_to_pandas(cupy):
    frame = strict_cupy.DataFrame(pd.DataFrame({"a": [1, 2]}))
    assert isinstance(frame["a"].values, cupy.ndarray)
    for converted in (frame, frame["a"], frame.index):
        with pytest.raises(TypeError, match="Implicit conversion"):
            np.asarray(converted)
    pd.testing.assert_frame_equal(backends.to_host(frame), pd.DataFrame({"a": [1, 2]}))
    with pytest.raises(TypeError, match="Unsupported type"):
        frame.assign(b=np.zeros(2))
    assert frame.assign(b=cupy.zeros(2)).to_pandas()["b"].tolist() == [0.0, 0.0]
