"""train-pipeline's shards read from ``--input``/``--labels`` ``.npy`` files with the GPU backend,
run on CPU through the strict CuPy stand-in: each shard's training and held-out rows must be
device arrays holding the file's rows, as the NumPy branch reads them, and a step's pass on them
must give NumPy's sums.
"""

from __future__ import annotations

import types

import numpy as np
import pytest

import daskgpu
from daskgpu.data import array_input
from daskgpu.toolkit.backends import Backend
from pipelines.train import inputs as train_inputs
from pipelines.train import pipeline as train_pipeline
from pipelines.train import tasks as train_steps

GPU = Backend("gpu", "cupy", "pandas", (types.SimpleNamespace(memory_total=10**12),), 1, 1)
DEVICE_KEYS = ("x", "y", "test_x", "test_y")


def _files(folder, rows: int, features: int, dtype: str, classes: int = 3):
    """Features and labels written to ``.npy`` files; their paths and values."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((rows, features)).astype(dtype)
    y = rng.integers(0, classes, rows)  # int64 in the file: int32 in a shard
    paths = (str(folder / "x.npy"), str(folder / "y.npy"))
    np.save(paths[0], x)
    np.save(paths[1], y)
    return paths, x, y


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_shard_read_on_the_device_holds_its_file_rows_as_the_numpy_branch(
        cupy_stand_in, tmp_path, dtype):
    (x_path, y_path), x, y = _files(tmp_path, 50, 4, dtype)
    readers = [train_inputs.reader_of(array_input.open_array(p)) for p in (x_path, y_path)]
    test = np.array([1, 7, 20])  # held-out rows of the range, counted from its start
    on_device = train_inputs.make_input_shard(*readers, 5, 35, test, 2, dtype, "cupy")
    on_host = train_inputs.make_input_shard(*readers, 5, 35, test, 2, dtype, "numpy")
    kept = np.setdiff1d(np.arange(5, 35), 5 + test)
    want = {"x": x[kept], "y": y[kept].astype(np.int32), "test_x": x[5 + test],
            "test_y": y[5 + test].astype(np.int32)}
    for key in DEVICE_KEYS:
        assert isinstance(on_device[key], cupy_stand_in.ndarray), key
        assert on_device[key].dtype == want[key].dtype, key
        np.testing.assert_array_equal(on_device[key].get(), want[key], err_msg=key)
        np.testing.assert_array_equal(on_device[key].get(), on_host[key], err_msg=key)
    assert (on_device["index"], on_device["best"]) == (2, 0.0)
    held = train_inputs.held_out_part(on_device)
    assert held["x"] is on_device["test_x"] and held["y"] is on_device["test_y"]

    weights = np.random.default_rng(6).standard_normal((5, 3)).astype(dtype)
    (gradient, loss, right, read, _), _ = train_steps.shard_pass(on_device, weights, True,
                                                                 "cupy")
    (want_gradient, want_loss, want_right, want_read, _), _ = train_steps.shard_pass(
        on_host, weights, True, "numpy")
    rtol = 1e-5 if dtype == "float32" else 1e-12
    assert type(gradient) is np.ndarray and read == want_read == len(kept)
    assert right == want_right
    assert loss == pytest.approx(want_loss, rel=rtol)
    np.testing.assert_allclose(gradient, want_gradient, rtol=rtol)


def test_a_gpu_runs_input_shards_are_device_arrays_holding_every_file_row_once(
        cupy_stand_in, tmp_path):
    """The shards a run on GPU workers makes from its inputs (the pipeline's own calls):
    training rows in file order without the held-out ones, which the shards keep apart."""
    (x_path, y_path), x, y = _files(tmp_path, 300, 5, "float32")
    spec = daskgpu.get_pipeline("train-pipeline")
    resolved = spec.resolve(GPU, input=x_path, labels=y_path, classes=3, chunks=100, seed=2)
    layout = train_pipeline._layout(resolved)
    make, arguments = train_pipeline._train_calls(resolved, layout)
    shards = [make(*args) for args in arguments]
    assert len(shards) == 3
    for shard in shards:
        assert all(isinstance(shard[key], cupy_stand_in.ndarray) for key in DEVICE_KEYS)
    test = train_inputs.held_out(2, 300)
    kept = np.setdiff1d(np.arange(300), test)
    assert len(test) > 0 and [s["x"].shape[0] for s in shards] == list(layout["train"])
    np.testing.assert_array_equal(np.concatenate([s["x"].get() for s in shards]), x[kept])
    np.testing.assert_array_equal(np.concatenate([s["y"].get() for s in shards]), y[kept])
    np.testing.assert_array_equal(np.concatenate([s["test_x"].get() for s in shards]), x[test])
    np.testing.assert_array_equal(np.concatenate([s["test_y"].get() for s in shards]), y[test])
