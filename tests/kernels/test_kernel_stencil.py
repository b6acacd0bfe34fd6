"""Heat-diffusion stencil: CPU twin and CUDA kernel (simulator) against the NumPy reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cudasim import run_in_simulator
from fake_cupy import SETUP

from daskgpu.kernels.stencil import heat_step_numpy, heat_steps, heat_steps_in_place

SHAPES = [(1, 1), (2, 5), (3, 3), (17, 33), (64, 64), (200, 130)]
STEPS = [0, 1, 2, 5]
TOL = {np.float64: dict(rtol=1e-13, atol=1e-15), np.float32: dict(rtol=1e-6, atol=1e-7)}


def reference(u, alpha, steps, window=None):
    out = u.copy()
    for _ in range(steps):
        out = heat_step_numpy(out, alpha, window)
    return out


def windows(n, m):
    """Full (clipped), default, one side touched, interior, empty and reversed windows."""
    return [
        None,
        (0, n, 0, m),
        (0, n // 2, 2, m - 2),  # top edge only
        (n // 2, n, 2, m - 2),  # bottom edge only
        (2, n - 2, 0, m // 2),  # left edge only
        (2, n - 2, m // 2, m),  # right edge only
        (n // 3, n // 3 + 3, m // 4, m // 4 + 5),
        (3, 3, 0, m),  # empty
        (n - 1, 1, 1, m - 1),  # reversed: empty
        (-5, n + 7, -1, m + 2),  # out of range: clipped to the ring
    ]


def clipped(window, n, m):
    r0, r1, c0, c1 = (1, n - 1, 1, m - 1) if window is None else window
    return max(r0, 1), min(r1, n - 1), max(c0, 1), min(c1, m - 1)


def naive_step(u, alpha, window):
    """One step by explicit loops over the clipped window (float64): checks the reference."""
    n, m = u.shape
    r0, r1, c0, c1 = clipped(window, n, m)
    out = u.copy()
    for i in range(r0, r1):
        for j in range(c0, c1):
            out[i, j] = u[i, j] + alpha * (
                u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4 * u[i, j]
            )
    return out


@pytest.mark.parametrize("window", windows(17, 33))
def test_numpy_reference_matches_explicit_loops(window):
    u = np.random.default_rng(3).random((17, 33))
    np.testing.assert_allclose(heat_step_numpy(u, 0.2, window), naive_step(u, 0.2, window),
                               rtol=1e-14, atol=0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_twin_matches_numpy_reference(shape, dtype):
    n, m = shape
    rng = np.random.default_rng(n * 1000 + m)
    u = rng.standard_normal(shape).astype(dtype)
    before = u.copy()
    for window in windows(n, m):
        r0, r1, c0, c1 = clipped(window, n, m)
        for steps in STEPS:
            alpha = [0.0, 0.1, 0.25, 0.17][steps % 4]
            got = heat_steps(u, alpha, steps, window)
            want = reference(u, alpha, steps, window)
            assert got.shape == u.shape and got.dtype == u.dtype
            assert got is not u and not np.shares_memory(got, u)
            np.testing.assert_allclose(got, want, **TOL[dtype],
                                       err_msg=f"window={window} steps={steps}")
            # cells outside the (clipped) window keep their values exactly
            outside = np.ones(shape, bool)
            if r1 > r0 and c1 > c0:
                outside[r0:r1, c0:c1] = False
            np.testing.assert_array_equal(got[outside], u[outside])
    np.testing.assert_array_equal(u, before)


def test_default_window_holds_the_ring_and_keeps_float32_arithmetic():
    u = np.random.default_rng(1).random((40, 50)).astype(np.float32)
    got = heat_steps(u, 0.2, 3)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got[[0, -1], :], u[[0, -1], :])
    np.testing.assert_array_equal(got[:, [0, -1]], u[:, [0, -1]])
    # float32 arithmetic throughout: the same bits as the float32 reference, not a float64 run
    np.testing.assert_array_equal(got, reference(u, 0.2, 3))
    assert not np.array_equal(got, reference(u.astype(np.float64), 0.2, 3).astype(np.float32))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_non_contiguous_and_read_only_input(dtype):
    big = np.random.default_rng(7).random((91, 120)).astype(dtype)
    views = {
        "strided": big[::2, ::3],
        "transposed": big.T,
        "fortran": np.asfortranarray(big[:40, :30]),
        "read-only": big[5:60],  # C-contiguous, so the twin reads it as it is
    }
    views["read-only"].flags.writeable = False
    before = big.copy()
    for name, u in views.items():
        assert u.flags.c_contiguous == (name == "read-only")
        for steps in (0, 1, 2, 5):
            for window in (None, (0, 10, 0, 10), (3, 20, 4, 9)):
                got = heat_steps(u, 0.2, steps, window)
                assert got.flags.c_contiguous and got.shape == u.shape
                np.testing.assert_allclose(got, reference(np.ascontiguousarray(u), 0.2, steps,
                                                          window),
                                           **TOL[dtype], err_msg=f"{name} {window} {steps}")
    np.testing.assert_array_equal(big, before)


def test_zero_steps_and_empty_window_return_a_copy():
    u = np.random.default_rng(2).random((6, 7))
    for got in (heat_steps(u, 0.2, 0), heat_steps(u, 0.2, 4, (3, 3, 1, 6))):
        np.testing.assert_array_equal(got, u)
        got[0, 0] = -1.0
        assert u[0, 0] != -1.0
    assert heat_steps(np.zeros((0, 5)), 0.2, 3).shape == (0, 5)


def test_closed_form_decay_of_the_lowest_mode():
    n, steps, alpha = 50, 20, 0.2
    k = np.arange(n + 2)
    mode = np.sin(np.pi * k / (n + 1))
    u0 = np.outer(mode, mode)
    u0[[0, -1], :] = 0.0  # sin(pi) is not exactly 0 in floating point: make the ring zero
    u0[:, [0, -1]] = 0.0
    lam = 1 - 8 * alpha * math.sin(math.pi / (2 * (n + 1))) ** 2
    got = heat_steps(u0, alpha, steps)
    np.testing.assert_allclose(got, lam**steps * u0, rtol=1e-10, atol=1e-14)
    assert got[n // 2, n // 2] < u0[n // 2, n // 2]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: heat_steps(np.zeros(5), 0.1, 1), r"2-D.*\(5,\)"),
        (lambda: heat_steps(np.zeros((2, 3, 4)), 0.1, 1), r"2-D.*\(2, 3, 4\)"),
        (lambda: heat_steps(np.zeros((4, 4)), 0.3, 1), "unstable above 0.25"),
        (lambda: heat_steps(np.zeros((4, 4)), -0.1, 1), "between 0 and 0.25"),
        (lambda: heat_steps(np.zeros((4, 4)), float("nan"), 1), "between 0 and 0.25"),
        (lambda: heat_steps(np.zeros((4, 4)), 0.1, -1), "steps must be >= 0"),
        (lambda: heat_steps(np.zeros((4, 4)), 0.1, 1, (1, 2, 3)), "four integers"),
        (lambda: heat_steps(np.zeros((4, 4)), 0.1, 1, (1.5, 2, 1, 3)), "four integers"),
        (lambda: heat_step_numpy(np.zeros(5), 0.1), r"2-D.*\(5,\)"),
        (lambda: heat_step_numpy(np.zeros((4, 4)), 0.3), "unstable above 0.25"),
    ],
)
def test_argument_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_non_float_input_is_refused():
    with pytest.raises(TypeError, match="float32 or float64"):
        heat_steps(np.zeros((4, 4), dtype=np.int64), 0.1, 1)
    with pytest.raises(TypeError):
        heat_steps(np.zeros((4, 4)), 0.1, 1.5)


def test_cuda_kernel_in_simulator():
    out = run_in_simulator(
        """
        import numpy as np
        from numba import cuda
        from daskgpu.kernels.stencil import heat_steps, heat_step_numpy

        def reference(u, alpha, steps, window):
            out = u.copy()
            for _ in range(steps):
                out = heat_step_numpy(out, alpha, window)
            return out

        tol = {np.float64: dict(rtol=1e-13, atol=1e-15), np.float32: dict(rtol=1e-6, atol=1e-7)}
        rng = np.random.default_rng(0)
        cases = 0
        # (10, 33): two blocks of (32, 8) threads each way; every simulated thread is costly, so
        # float32 (the same code, other types) takes the one grid that has every path
        shapes = {np.float64: ((10, 33), (9, 9), (1, 1), (3, 40)), np.float32: ((10, 33),)}
        for dtype in (np.float64, np.float32):
            for shape in shapes[dtype]:
                n, m = shape
                u = rng.standard_normal(shape).astype(dtype)
                d = cuda.to_device(u)
                wins = [None, (0, n, 0, m), (0, n // 2, 3, m), (2, n, 0, m // 2), (4, 4, 0, m)]
                for window in wins:
                    for steps in (0, 1, 2):  # none; odd and even: ends in each buffer
                        got = heat_steps(d, 0.2, steps, window)
                        assert got is not d
                        host = got.copy_to_host()
                        assert host.shape == shape and host.dtype == dtype, (host.dtype, dtype)
                        msg = f"{dtype.__name__} {shape} {window} {steps}"
                        np.testing.assert_allclose(host, reference(u, 0.2, steps, window),
                                                   **tol[dtype], err_msg=msg)
                        np.testing.assert_allclose(host, heat_steps(u, 0.2, steps, window),
                                                   **tol[dtype], err_msg=msg)
                        cases += 1
                np.testing.assert_array_equal(d.copy_to_host(), u)  # input unchanged

            # a strided device view
            big = rng.standard_normal((12, 30)).astype(dtype)
            view = cuda.to_device(big)[::2, ::3]
            want = reference(np.ascontiguousarray(big[::2, ::3]), 0.25, 3, None)
            np.testing.assert_allclose(heat_steps(view, 0.25, 3).copy_to_host(), want,
                                       **tol[dtype])
            np.testing.assert_array_equal(view.copy_to_host(), big[::2, ::3])
            cases += 1
        print("cases", cases)
        """
    )
    assert "cases 77" in out


@pytest.mark.gpu
def test_cuda_kernel_on_gpu_matches_cpu_twin():
    import cupy

    rng = np.random.default_rng(5)
    for dtype in (np.float64, np.float32):
        for shape in ((1, 1), (33, 517), (1000, 777)):
            u = rng.standard_normal(shape).astype(dtype)
            d = cupy.asarray(u)
            for window in (None, (0, shape[0] // 2, 5, shape[1])):
                for steps in (0, 1, 4):
                    got = heat_steps(d, 0.2, steps, window)
                    assert isinstance(got, cupy.ndarray) and got.dtype == dtype
                    # the GPU may fuse multiply-adds: agree to rounding, not bit for bit
                    np.testing.assert_allclose(cupy.asnumpy(got),
                                               heat_steps(u, 0.2, steps, window),
                                               rtol=1e-5 if dtype == np.float32 else 1e-12,
                                               atol=1e-6 if dtype == np.float32 else 1e-13)
            np.testing.assert_array_equal(cupy.asnumpy(d), u)


# --- CuPy input, routed as on a GPU (a stand-in for CuPy in the simulator: tests/fake_cupy.py) ----

NO_SYNC = SETUP + """
import numpy as np
import fake_cupy
from daskgpu.kernels import stencil as mod

fake_cupy.record(mod, "_step_kernel")
u = np.random.default_rng(7).standard_normal((20, 37))
d = fake_cupy.asarray(u)
for steps in (0, 1, 2, 6):
    del fake_cupy.conversions[:], fake_cupy.allocations[:], fake_cupy.launches[:]
    out = mod.heat_steps(d, 0.2, steps)
    assert isinstance(out, fake_cupy.ndarray), type(out)
    np.testing.assert_allclose(out.get(), mod.heat_steps(u, 0.2, steps), rtol=1e-13, atol=1e-15)
    fake_cupy.assert_launched_on_cupy_stream()
    assert len(fake_cupy.launches) == max(steps, 1)
    # the input and each buffer imported once, however many steps, and without a host sync
    buffers = fake_cupy.allocations
    assert len(buffers) == (2 if steps >= 2 else 1), len(buffers)
    assert any(out is b for b in buffers)
    imported = [a for a, _ in fake_cupy.conversions]
    assert all(sync is False for _, sync in fake_cupy.conversions), fake_cupy.conversions
    assert len(imported) == 1 + len(buffers), (steps, len(imported))
    assert all(any(a is b for a in imported) for b in [d, *buffers])
    # each launch reads the buffer the one before wrote
    for (_, _, before), (_, _, after) in zip(fake_cupy.launches, fake_cupy.launches[1:]):
        assert after[0] is before[1]
print("OK no sync")
"""


def test_cupy_input_is_imported_once_without_host_sync():
    """The input and both buffers are imported once with ``sync=False``, not once per step."""
    assert "OK no sync" in run_in_simulator(NO_SYNC)


# --- heat_steps_in_place: two buffers the caller owns ----------------------------------------

@pytest.mark.parametrize("steps", [0, 1, 2, 5])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_in_place_ping_pongs_in_the_callers_buffers(steps, dtype):
    u0 = np.random.default_rng(steps).random((300, 200)).astype(dtype)
    window = (2, 290, 1, 180)
    u, scratch = u0.copy(), np.empty_like(u0)
    got = heat_steps_in_place(u, scratch, 0.2, steps, window)
    assert got is (u if steps % 2 == 0 else scratch)  # even: back in u, odd: in scratch
    np.testing.assert_allclose(got, reference(u0, 0.2, steps, window), **TOL[dtype])


IN_PLACE_PEAKS = """
import sys, tracemalloc
import numpy as np
from daskgpu.kernels.stencil import heat_steps_in_place
for dtype in (np.float64, np.float32):
    u0 = np.random.default_rng(0).random((300, 200)).astype(dtype)
    heat_steps_in_place(u0.copy(), np.empty_like(u0), 0.2, 1, (2, 290, 1, 180))  # compiled
    for steps in (1, 2, 5):
        u, scratch = u0.copy(), np.empty_like(u0)
        tracemalloc.start()
        heat_steps_in_place(u, scratch, 0.2, steps, (2, 290, 1, 180))
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(steps, u0.nbytes, peak)
"""


def test_in_place_allocates_no_buffer():
    """No buffer of its own, none per step: measured alone in a process (tracemalloc counts
    every thread's allocations, and a test process has a cluster's threads)."""
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run([sys.executable, "-c", IN_PLACE_PEAKS], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = [tuple(map(int, line.split())) for line in proc.stdout.splitlines()]
    assert len(rows) == 6
    for steps, nbytes, peak in rows:
        assert peak < nbytes // 10, (steps, nbytes, peak)


def test_in_place_refuses_buffers_that_do_not_match():
    u = np.zeros((6, 6))
    with pytest.raises(ValueError, match="scratch must match u"):
        heat_steps_in_place(u, np.zeros((6, 5)), 0.1, 1)
    with pytest.raises(ValueError, match="scratch must match u"):
        heat_steps_in_place(u, np.zeros((6, 6), np.float32), 0.1, 1)
    with pytest.raises(ValueError, match="C-contiguous"):
        heat_steps_in_place(np.zeros((6, 12))[:, ::2], np.zeros((6, 6)), 0.1, 1)


IN_PLACE = SETUP + """
import numpy as np
import fake_cupy
from numba import cuda
from daskgpu.kernels import stencil as mod

fake_cupy.record(mod, "_step_kernel")
rng = np.random.default_rng(3)
u0 = rng.standard_normal((10, 33))
for steps in (0, 1, 2, 3):
    d, s = fake_cupy.asarray(u0), fake_cupy.asarray(np.zeros_like(u0))
    del fake_cupy.conversions[:], fake_cupy.allocations[:], fake_cupy.launches[:]
    got = mod.heat_steps_in_place(d, s, 0.2, steps, (0, 10, 3, 33))
    assert got is (d if steps % 2 == 0 else s)
    assert not fake_cupy.allocations and len(fake_cupy.launches) == steps
    assert all(sync is False for _, sync in fake_cupy.conversions)
    want = mod.heat_steps_in_place(u0.copy(), np.empty_like(u0), 0.2, steps, (0, 10, 3, 33))
    np.testing.assert_allclose(got.get(), want, rtol=1e-13, atol=1e-15)
    # a Numba device array works as well (the simulator's kernel, both buffers on the device)
    a, b = cuda.to_device(u0), cuda.to_device(np.zeros_like(u0))
    np.testing.assert_allclose(mod.heat_steps_in_place(a, b, 0.2, steps, (0, 10, 3, 33))
                               .copy_to_host(), want, rtol=1e-13, atol=1e-15)
print("OK in place")
"""


def test_in_place_on_the_device_allocates_nothing_and_matches_the_twin():
    assert "OK in place" in run_in_simulator(IN_PLACE)
