"""train-pipeline on arrays in hand (NumPy and Dask arrays, or one file and one array) and with
no rows held out (``validation_fraction=0``): verified as files are, faults caught."""

from __future__ import annotations

import copy

import dask.array
import distributed
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.errors import InputFileError, InputTypeError, ParameterError
from pipelines.train import tasks as train_steps

DEPTHS = ("fast", "full")
# 2400 rows of 16 features: 240 held out, four training shards of 540 rows (ranges of 600).
PARAMS = {"classes": 4, "steps": 4, "chunks": 540, "learning_rate": 0.8, "seed": 5}
NOT_REPORTED = {"teacher's best accuracy altered"}  # an input has no teacher


def _data(rows: int = 2400, features: int = 16, classes: int = 4):
    """Rows a random linear teacher labels (float32), and their labels (int64)."""
    rng = np.random.default_rng(17)
    x = rng.standard_normal((rows, features)).astype(np.float32)
    y = np.argmax(x @ rng.standard_normal((features, classes)) + rng.gumbel(size=(rows,
                                                                                 classes)), 1)
    return x, y.astype(np.int64)


def _on_a_worker(block):
    distributed.get_worker()  # raises ValueError outside a worker: the graph pulled elsewhere
    return block


def _given(kind: str, x, y, workers_only: bool = False) -> tuple:
    """Features and labels as NumPy arrays, or as Dask arrays of blocks that are not the run's
    (with ``workers_only``: blocks that fail where they are computed anywhere but a worker)."""
    if kind == "numpy":
        return x, y
    given = (dask.array.from_array(x, chunks=(250, 16)), dask.array.from_array(y, chunks=250))
    return tuple(a.map_blocks(_on_a_worker, meta=a._meta) for a in given) if workers_only \
        else given


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_every_declared_mutation_is_caught_on_arrays_in_memory(cpu_client, kind):
    spec = daskgpu.get_pipeline("train-pipeline")
    x, y = _given(kind, *_data(1200))
    _spec, workload, raw = compute_as_runner(cpu_client, "train-pipeline", input=x, labels=y,
                                             **{**PARAMS, "steps": 3, "chunks": 270})
    assert workload.description["format"] == ["memory", "memory"]
    assert ("rechunked" in workload.description) == (kind == "dask")
    shown = "numpy.ndarray" if kind == "numpy" else "dask.array.Array"
    assert workload.resolved["input"] == f"{shown} float32 (1200, 16)"
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)
        if depth == "fast":
            assert "read again from the arrays in memory" in check.detail, check.detail
        for mutation in spec.mutations:
            if mutation.name in NOT_REPORTED:
                continue
            altered = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                                depth)
            assert not altered.ok and mutation.named_in(altered.detail), (
                depth, mutation.name, altered.detail)


# One training shard of the four: a random one (seeded, neither the first nor the last), the last.
ONE_SHARD = {"random": int(np.random.default_rng(31).integers(1, 3)), "last": 3}


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", sorted(ONE_SHARD))
def test_a_fault_in_one_shards_gradient_of_an_array_in_memory_fails_both_depths(
        in_process_client, monkeypatch, kind, where):
    """The run's own per-shard pass makes one shard's gradient 0.2 % large at every step, its
    cells' probes and reported gradients alike (the run's numbers agree with each other): both
    depths recompute from the objects and fail. Dask arrays are computed on workers only."""
    faulty, original = ONE_SHARD[where], train_steps.shard_pass

    def off(shard, weights, gradient, *args):
        (total, loss, right, rows, cells), seconds = original(shard, weights, gradient, *args)
        if gradient and shard["index"] == faulty and shard["y"].shape[0] == 540:
            total = total * 1.002
            cells = [(i, {**sums, **{key: sums[key] * 1.002 for key in ("probe", "gradient")
                                     if key in sums}}) for i, sums in cells]
        return (total, loss, right, rows, cells), seconds

    monkeypatch.setattr(train_steps, "shard_pass", off)
    x, y = _given(kind, *_data(), workers_only=True)
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", input=x,
                                            labels=y, **PARAMS)
    assert workload.context.train_sizes == (540,) * 4
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        assert (f"shard {faulty} cell 0: gradient[" if depth == "fast" else
                "weights[") in check.detail, (depth, check.detail)


def test_arrays_in_memory_train_to_the_weights_of_the_same_npy_files(cpu_client, tmp_path):
    x, y = _data(1200, 6, 3)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    files = {"input": str(tmp_path / "x.npy"), "labels": str(tmp_path / "y.npy")}
    params = {"classes": 3, "epochs": 2, "batch_size": 300, "optimizer": "adam",
              "learning_rate": 0.01, "chunks": 500, "seed": 3}
    spec = daskgpu.get_pipeline("train-pipeline")
    _s, _w, from_files = compute_as_runner(cpu_client, spec.name, **files, **params)
    for given in ({"input": x, "labels": y},
                  {"input": dask.array.from_array(x, chunks=(300, 6)), "labels": files["labels"]},
                  {"input": files["input"], "labels": dask.array.from_array(y, chunks=400)}):
        _s, workload, raw = compute_as_runner(cpu_client, spec.name, **given, **params)
        np.testing.assert_array_equal(raw["weights"], from_files["weights"])
        np.testing.assert_array_equal(raw["losses"], from_files["losses"])
        for name, value in given.items():
            assert workload.resolved[name] == (value if isinstance(value, str) else
                                               daskgpu.data.memory_input.label(value))
    assert verify_on(cpu_client, spec, workload, raw, "full").ok  # a file and an array


def test_a_kept_row_that_is_not_the_arrays_fails_the_fast_check(in_process_client):
    x, y = _data()
    spec, workload, raw = compute_as_runner(in_process_client, "train-pipeline", input=x,
                                            labels=y, **PARAMS)

    def corrupt(shard):
        shard["x"][5, 0] += 1.0  # the worker's kept copy (a thread of this process)

    in_process_client.client.submit(corrupt, workload.context.shards.futures[2],
                                    pure=False).result()
    check = verify_on(in_process_client, spec, workload, raw, "fast")
    assert not check.ok and "shard 2: kept row 5 differs from the arrays in memory" in (
        check.detail), check.detail


@pytest.mark.parametrize("source", ["array", "generated"])
def test_no_rows_held_out_verifies_and_says_so(cpu_client, source):
    data = ({"input": _data(1000, 5, 3)[0], "labels": _data(1000, 5, 3)[1]}
            if source == "array" else {"samples": 1000, "features": 5})
    spec = daskgpu.get_pipeline("train-pipeline")
    _s, workload, raw = compute_as_runner(cpu_client, spec.name, classes=3, steps=3,
                                          chunks=500, seed=2, validation_fraction=0, **data)
    ctx = workload.context
    assert ctx.samples == 1000 and ctx.test_sizes == () and len(ctx.shards.futures) == 2
    assert raw["test_right"] == 0 and raw["test_cells"]["loss"].size == 0
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "no rows held out (validation fraction 0)" in check.detail, (
            depth, check.detail)
        assert "test accuracy" not in check.detail
        inflated = verify_on(cpu_client, spec, workload, {**raw, "test_right": 1}, depth)
        assert not inflated.ok and "test accuracy 1.000000 reported" in inflated.detail
    result = daskgpu.run(spec, cpu_client, classes=3, steps=3, chunks=500, seed=2,
                         validation_fraction=0, **data)
    assert result.verified and result.value["test_loss"] is None
    assert "test_accuracy" in result.data and result.data["test_accuracy"] is None
    assert result.data["train vs held out"].endswith("(1000 training rows, none held out)")


@pytest.mark.parametrize(("given", "kind", "fragment"), [
    ({"labels": [0, 1] * 600}, InputTypeError, "--labels: a list is not an input"),
    ({"labels": np.zeros(1000, dtype=np.int64)}, InputFileError,
     "--labels numpy.ndarray int64 (1000,): 1000 labels for the 1200 rows of --input "
     "numpy.ndarray float32 (1200, 6)"),
    ({"labels": np.full(1200, 7)}, InputFileError,
     "with --classes 3 they must lie in 0..2 (give --classes 8 or more)"),
    ({"input": np.zeros((1200, 6), dtype=np.int32)}, InputFileError,
     "--input numpy.ndarray int32 (1200, 6): holds int32 values"),
    ({"validation_fraction": 1}, ParameterError, "0: none"),
])
def test_bad_arrays_are_refused_in_one_line_by_kind(given, kind, fragment):
    x, y = _data(1200, 6, 3)
    with pytest.raises(kind) as caught:
        daskgpu.get_pipeline("train-pipeline").resolve(**{"input": x, "labels": y, "classes": 3,
                                                          **given})
    assert fragment in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_dask_labels_out_of_range_are_refused_on_the_workers_in_one_line(cpu_client):
    x, y = _data(1200, 6, 3)
    labels = dask.array.from_array(np.where(np.arange(1200) == 1100, 5, y), chunks=300)
    with pytest.raises(InputFileError) as caught:
        daskgpu.run("train-pipeline", cpu_client, input=x, labels=labels, classes=3, steps=1)
    assert str(caught.value) == ("labels=dask.array.Array int64 (1200,): labels from 0 to 5; "
                                 "with classes=3 they must lie in 0..2 (give classes=6 or more)")


def test_a_shard_of_arrays_in_hand_on_the_device_holds_what_numpys_holds(cupy_stand_in):
    """GPU workers split blocks already on the device (or one on the host, one on the device)
    as CPU workers split NumPy's (the strict CuPy stand-in refuses implicit host copies)."""
    from pipelines.train import inputs as train_inputs

    x, y = _data(50, 4, 3)
    test = np.array([1, 7, 20])
    host = train_inputs.make_memory_shard(x, y, test, 2, "float32", "numpy")
    for given in ((cupy_stand_in.asarray(x), cupy_stand_in.asarray(y)),
                  (x, cupy_stand_in.asarray(y))):
        device = train_inputs.make_memory_shard(*given, test, 2, "float32", "cupy")
        for key in ("x", "y", "test_x", "test_y"):
            assert isinstance(device[key], cupy_stand_in.ndarray), key
            np.testing.assert_array_equal(device[key].get(), host[key], err_msg=key)
        assert train_inputs.label_range(device) == train_inputs.label_range(host) == (0, 2)
    assert host["x"].shape == (47, 4) and host["y"].dtype == np.int32
