"""The one-process baselines of train, kmeans, matmul, pca and fft with a GPU backend, run on
CPU through the strict CuPy stand-in (the array library a GPU worker's baseline imports).

Each reads the same small ``.npy`` input with the CPU backend and with the GPU backend, and
the two answers must agree to the input's precision. On the GPU backend the input must reach
the device, the timed part must compute there (device arrays made while it runs, the device
waited for), and the answer must come back as host values; the stand-in refuses every implicit
conversion of a device array and every host operand, so a baseline that slipped back to the
host, or mixed host and device data, fails here.

kmeans' k-means|| launches a Numba kernel (each round's counts and cost), which cannot run on
the stand-in: on both backends it runs as a NumPy reference (on the host values of the device
shards, ``strict_cupy.host_kernel``); the code around it is what is under test.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import strict_cupy

import daskgpu
from daskgpu.toolkit import timing
from daskgpu.toolkit.backends import Backend

CPU = Backend("cpu", "numpy", "pandas", (), 1, 1)
GPU = Backend("gpu", "cupy", "pandas", (types.SimpleNamespace(memory_total=10**12),), 1, 1)


def _saved(folder, name: str, values: np.ndarray) -> str:
    path = folder / f"{name}.npy"
    np.save(path, values)
    return str(path)


def _inputs(name: str, folder) -> tuple[dict, int, np.dtype]:
    """A small run's parameters reading ``.npy`` inputs, their elements, their element type."""
    rng = np.random.default_rng(11)
    if name == "matmul-pipeline":
        a, b = rng.random((40, 30)), rng.random((30, 20))
        return ({"input_a": _saved(folder, "a", a), "input_b": _saved(folder, "b", b),
                 "chunks": "20,15,10"}, a.size + b.size, a.dtype)
    if name == "train-pipeline":
        x = rng.standard_normal((300, 5)).astype(np.float32)
        labels = (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0.5)
        return ({"input": _saved(folder, "x", x), "labels": _saved(folder, "y", labels),
                 "classes": 3, "steps": 3, "chunks": 100, "seed": 2}, x.size, x.dtype)
    if name == "kmeans-pipeline":
        x = (rng.standard_normal((400, 3)) + 6 * (np.arange(400) % 3)[:, None]).astype(
            np.float32)
        return {"input": _saved(folder, "x", x), "k": 3, "chunks": 200, "seed": 2}, x.size, x.dtype
    x = rng.standard_normal((300, 6) if name == "pca-pipeline" else (16, 12))
    if name == "pca-pipeline":
        return {"input": _saved(folder, "x", x), "components": 3, "chunks": 100}, x.size, x.dtype
    return {"input": _saved(folder, "x", x), "chunks": 8}, x.size, x.dtype


@pytest.fixture
def device_work(cupy_stand_in, monkeypatch):
    """The stand-in, recording the host elements copied to the device, the device arrays made
    while a baseline is timed, and the timings."""
    seen = types.SimpleNamespace(copied_in=0, made=0, made_timed=[])
    init, asarray, array = (strict_cupy.ndarray.__init__, cupy_stand_in.asarray,
                            cupy_stand_in.array)

    def made(self, values):
        init(self, values)
        seen.made += 1

    def copied(into):
        def copy(a, *args, **kwargs):
            if not isinstance(a, strict_cupy.ndarray):
                seen.copied_in += np.size(a)
            return into(a, *args, **kwargs)
        return copy

    time_call = timing.time_call

    def timed_call(backend, fn):
        before = seen.made
        seconds = time_call(backend, fn)
        seen.made_timed.append(seen.made - before)
        return seconds

    monkeypatch.setattr(strict_cupy.ndarray, "__init__", made)
    monkeypatch.setattr(cupy_stand_in, "asarray", copied(asarray))
    monkeypatch.setattr(cupy_stand_in, "array", copied(array))
    monkeypatch.setattr(timing, "time_call", timed_call)
    from pipelines.kmeans import tasks as kmeans_steps

    monkeypatch.setattr(kmeans_steps, "kmeans_counts_cost", strict_cupy.host_kernel(_counts_cost))
    return seen


def _counts_cost(x, candidates):
    """k-means||'s counts-and-cost pass by its definition: the points nearest each candidate
    (float64 distances, the lowest index on ties) and their total squared distance."""
    finite = x[np.isfinite(x).all(axis=1)].astype(np.float64)
    distances = ((finite[:, None, :] - candidates[None]) ** 2).sum(axis=2)
    counts = np.bincount(distances.argmin(axis=1), minlength=len(candidates))
    return counts.astype(np.int64), np.array([distances.min(axis=1).sum()])


def _host_only(value) -> bool:
    if isinstance(value, dict):
        return all(_host_only(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_host_only(v) for v in value)
    return isinstance(value, (int, float, str, np.ndarray, np.generic))


def _agree(got, want, rtol: float, where: str = "answer") -> None:
    """``got`` equals ``want``: integers (counts, cells) exactly, other numbers to ``rtol``."""
    if isinstance(want, dict):
        assert got.keys() == want.keys(), where
        for key in want:
            _agree(got[key], want[key], rtol, f"{where}[{key!r}]")
    elif isinstance(want, int) or (isinstance(want, list) and all(isinstance(v, int)
                                                                    for v in want)):
        assert got == want, where
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float),
                                   rtol=rtol, atol=0, err_msg=where)


@pytest.mark.parametrize("name", ["train-pipeline", "kmeans-pipeline", "matmul-pipeline",
                                  "pca-pipeline", "fft-pipeline"])
def test_the_baseline_with_a_gpu_backend_computes_on_the_device_as_the_cpu_ones(
        device_work, cupy_stand_in, tmp_path, name):
    spec = daskgpu.get_pipeline(name)
    params, elements, dtype = _inputs(name, tmp_path)
    cpu_seconds, on_cpu = spec.baseline(spec.resolve(CPU, **params))
    assert device_work.copied_in == 0 and device_work.made_timed == [0]  # NumPy: no device

    device_work.made_timed.clear()
    seconds, on_device = spec.baseline(spec.resolve(GPU, **params))
    assert seconds > 0 and cpu_seconds > 0
    assert device_work.copied_in >= elements  # the whole input went to the device
    (made,) = device_work.made_timed
    assert made > 0  # the timed part computed on device arrays
    assert ("sync",) in cupy_stand_in.events  # and its queued work was waited for
    assert _host_only(on_device), on_device
    _agree(on_device, on_cpu, rtol=1e-5 if dtype == np.float32 else 1e-12)
