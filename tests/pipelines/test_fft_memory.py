"""fft-pipeline on arrays in hand: NumPy and Dask arrays as ``input=``, in every layout."""

from __future__ import annotations

import copy

import dask.array
import distributed
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.toolkit.backends import Backend
from pipelines.fft import tasks as fft_blocks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
DEPTHS = ("fast", "full")


def _complex(shape, dtype="complex128", seed=10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def _given(kind: str, values: np.ndarray, blocks=(7, 11), workers_only: bool = False):
    """The values as they are, or as a Dask array in blocks that are not the run's slabs; with
    ``workers_only``, one whose blocks fail where they are computed anywhere but a worker."""
    if kind == "numpy":
        return values
    given = dask.array.from_array(values, chunks=blocks)
    return given.map_blocks(_on_a_worker, meta=given._meta) if workers_only else given


def _on_a_worker(block):
    distributed.get_worker()  # raises ValueError outside a worker: the graph pulled elsewhere
    return block


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_every_mutation_of_a_run_on_an_array_in_memory_is_caught(cpu_client, kind):
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline",
                                            input=_given(kind, _complex((36, 36))), chunks=10)
    assert workload.description["format"] == "memory"
    assert workload.description.get("rechunked") == (
        None if kind == "numpy" else "rechunked from blocks of (7, 11) to (10, 36), the "
        "pipeline's")
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "3 largest reported cells agree" in check.detail, check.detail
        for mutation in spec.mutations:
            altered = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                                depth)
            assert not altered.ok and mutation.named_in(altered.detail), (
                depth, mutation.name, altered.detail)


# One row slab of ten: a random one (a seeded draw, not the first), and the last.
ONE_SLAB = {"random": int(np.random.default_rng(41).integers(1, 9)), "last": 9}


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", sorted(ONE_SLAB))
def test_one_slab_of_an_array_in_memory_transformed_wrong_fails_both_depths(
        in_process_client, monkeypatch, kind, where):
    """The run's row transform of one slab of the input in hand has its twiddles 0.2 % off at
    every other frequency: both depths read the slab's rows again from the object. A Dask
    array is computed on the workers only, by the run and by the checks."""
    slab, transform = ONE_SLAB[where], fft_blocks.along_rows

    def faulty(block, block_info=None, **kwargs):
        out = transform(block, **kwargs)
        if block_info[0]["chunk-location"][0] == slab:
            out = out.copy()
            out[:, 1::2] *= np.exp(1j * 0.002)
        return out

    monkeypatch.setattr(fft_blocks, "along_rows", faulty)
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline",
                                            input=_given(kind, _complex((40, 40), seed=3),
                                                         workers_only=True),
                                            chunks=4, layout="slabs")
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "its transform at sampled cell" in check.detail, (
            depth, check.detail)
        row = int(check.detail.split("input row ")[1].split(":")[0].split(",")[0])
        assert row // 4 == slab, (depth, check.detail)


# The transforms and their inputs: complex of both precisions, a real input, irfft2's half
# spectrum (held transposed: its column blocks are the run's slabs).
CASES = {
    "fft2 complex64": (lambda: _complex((24, 20), "complex64"), {}),
    "ifft2 complex128": (lambda: _complex((24, 20)), {"inverse": True}),
    "rfft2 float32": (lambda: np.random.default_rng(4).standard_normal((24, 20)).astype(
        np.float32), {"real": True}),
    "irfft2 complex128": (lambda: np.fft.rfft2(np.random.default_rng(5).standard_normal(
        (24, 20))), {"inverse": True, "real": True, "shape": (24, 20)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_array_in_memory_gives_the_files_answer_in_every_layout(cpu_client, tmp_path, case):
    """The same values from a .npy file and in hand, a Dask array in other blocks in both
    layouts (the run's slabs and the whole array in one worker): the same answer, verified."""
    make, options = CASES[case]
    values = make()
    path = tmp_path / "x.npy"
    np.save(path, values)
    run = {"chunks": 5, "verify": "full", **options}
    answers = {}
    for name, given, layout in (("file", str(path), "slabs"), ("file", str(path), "whole"),
                                ("dask", _given("dask", values), "slabs"),
                                ("dask", _given("dask", values), "whole"),
                                ("numpy", values, "whole")):
        result = daskgpu.run("fft-pipeline", cpu_client, input=given, layout=layout,
                             keep=False, **run)  # the values compared here, not the spectrum
        assert result.verified, (name, layout, result.verification)
        assert result.data["layout"] == layout and result.data["dtype"] in (
            "complex64", "complex128")
        answers[name, layout] = result.value
    assert answers["dask", "slabs"] == answers["file", "slabs"]
    assert answers["dask", "whole"] == answers["numpy", "whole"] == answers["file", "whole"]
    value = answers["numpy", "whole"]
    assert type(value["sum_of_squares"]) is float and type(value["max_magnitude"]) is float
    assert all(type(i) is int for i in value["max_at"]) and len(value["max_at"]) == 2
    transform = {"fft2 complex64": np.fft.fft2, "ifft2 complex128": np.fft.ifft2,
                 "rfft2 float32": np.fft.rfft2,
                 "irfft2 complex128": lambda x: np.fft.irfft2(x, s=(24, 20))}[case]
    expected = np.abs(transform(values.astype(np.complex128 if values.dtype.kind == "c"
                                              else np.float64)))
    assert value["max_magnitude"] == pytest.approx(expected.max(), rel=1e-5)
    assert value["sum_of_squares"] == pytest.approx((expected**2).sum(), rel=1e-5)


@pytest.mark.parametrize(("given", "options", "kind", "message"), [
    (np.zeros((6, 6), dtype=np.int64), {}, ValueError,
     "--input numpy.ndarray int64 (6, 6): holds int64 values; a numeric array of complex64 or "
     "complex128 or float32 or float64 is needed"),
    (np.zeros((4, 5, 6)), {}, ValueError,
     "numpy.ndarray float64 (4, 5, 6): holds an array of shape 4 x 5 x 6; a 2-D array"),
    (dask.array.zeros((6, 6), dtype=np.complex64, chunks=3), {"real": True}, ValueError,
     "dask.array.Array complex64 (6, 6): holds complex64 values; --real transforms real data"),
    (np.zeros((6, 3), dtype=np.complex128), {"inverse": True, "real": True, "shape": (6, 8)},
     ValueError, "--shape 6,8 (irfft2's result) needs the 6 x 5 half spectrum"),
    ({"x": 1}, {}, TypeError, "a dict is not an input daskgpu reads"),
])
def test_an_object_it_cannot_transform_is_refused_in_one_line_by_kind(given, options, kind,
                                                                     message):
    with pytest.raises(kind) as caught:
        daskgpu.get_pipeline("fft-pipeline").resolve(CPU2, input=given, **options)
    assert isinstance(caught.value, daskgpu.DaskGPUError)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
