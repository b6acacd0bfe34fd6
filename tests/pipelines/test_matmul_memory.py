"""matmul-pipeline on arrays in hand: NumPy and Dask arrays (or one file, one array) as A and B."""

from __future__ import annotations

import copy

import dask.array
import distributed
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.toolkit.backends import Backend
from pipelines.matmul import pipeline as matmul_pipeline
from pipelines.matmul import tasks as matmul_tasks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
DEPTHS = ("fast", "full")
# C in 4 x 3 blocks of 50 x 60; the contraction (k = 160) summed in three pieces: 60, 60, 40.
CHUNKS = "50,60,60"


def _operands(n: int = 200, k: int = 160, m: int = 180) -> tuple[np.ndarray, np.ndarray]:
    """A float64, B float32 (the product float64)."""
    rng = np.random.default_rng(23)
    return rng.standard_normal((n, k)), rng.standard_normal((k, m)).astype(np.float32)


def _given(kind: str, a: np.ndarray, b: np.ndarray, workers_only: bool = False) -> tuple:
    """A and B as they are, or as Dask arrays in blocks that are not the run's; with
    ``workers_only``, ones whose blocks fail where they are computed anywhere but a worker."""
    if kind == "numpy":
        return a, b
    given = (dask.array.from_array(a, chunks=(64, 70)),
             dask.array.from_array(b, chunks=(45, b.shape[1])))
    return tuple(x.map_blocks(_on_a_worker, meta=x._meta) for x in given) if workers_only else (
        given)


def _on_a_worker(block):
    distributed.get_worker()  # raises ValueError outside a worker: the graph pulled elsewhere
    return block


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_every_mutation_of_a_product_of_arrays_in_memory_is_caught(cpu_client, kind):
    """C in 2 x 2 blocks of 50 x 45, the contraction (k = 80) in two pieces."""
    a, b = _given(kind, *_operands(100, 80, 90))
    spec, workload, raw = compute_as_runner(cpu_client, "matmul-pipeline", input_a=a,
                                            input_b=b, chunks="50,40,45")
    assert workload.description["format"] == ["memory", "memory"]
    assert workload.description.get("rechunked") == (None if kind == "numpy" else [
        "rechunked from blocks of (64, 70) to (50, 40), the pipeline's",
        "rechunked from blocks of (45, 90) to (40, 45), the pipeline's"])
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "re-read from the inputs" in check.detail, (depth, check.detail)
        for mutation in spec.mutations:
            altered = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                                depth)
            assert not altered.ok and mutation.named_in(altered.detail), (
                depth, mutation.name, altered.detail)


# One block of C's twelve: a random one (a seeded draw, neither the first nor the last), the last.
ONE_BLOCK = {"random": divmod(int(np.random.default_rng(43).integers(1, 11)), 3),
             "last": (3, 2)}


@pytest.mark.parametrize("kind", ["numpy", "dask"])
@pytest.mark.parametrize("where", sorted(ONE_BLOCK))
def test_one_block_of_a_product_of_arrays_in_memory_off_fails_both_depths(
        in_process_client, monkeypatch, kind, where):
    """The run's own reduction of one block of C sees it a millionth too large: both depths,
    A and B read again from the objects, name the block. Dask arrays are computed on the
    workers only, by the run and by the checks."""
    block, original = ONE_BLOCK[where], matmul_tasks._block_summary

    def faulty(c, block_info=None, **packing):
        if tuple(block_info[0]["chunk-location"]) == block:
            c = c * (1 + 1e-6)
        return original(c, block_info=block_info, **packing)

    monkeypatch.setattr(matmul_tasks, "_block_summary", faulty)
    a, b = _given(kind, *_operands(), workers_only=True)
    spec, workload, raw = compute_as_runner(in_process_client, "matmul-pipeline", input_a=a,
                                            input_b=b, chunks=CHUNKS)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and f"block {block} of C" in check.detail, (depth, check.detail)


def test_the_last_block_of_a_dask_operand_read_wrong_fails_both_depths(in_process_client,
                                                                       monkeypatch):
    """The run's A has its last block row 0.2 % off as it reads it: the check, reading the
    user's Dask array again apart from the run's graph, fails at both depths."""
    original = matmul_tasks.operands

    def misread(resolved):
        a, b, about = original(resolved)

        def off(block, block_info=None):
            return block * 1.002 if block_info[0]["chunk-location"][0] == 3 else block

        return a.map_blocks(off, dtype=a.dtype), b, about

    monkeypatch.setattr(matmul_pipeline, "operands", misread)
    a, b = _given("dask", *_operands())
    spec, workload, raw = compute_as_runner(in_process_client, "matmul-pipeline", input_a=a,
                                            input_b=b, chunks=CHUNKS)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok and "of C" in check.detail, (depth, check.detail)
        assert "block (3, " in check.detail, (depth, check.detail)


def test_arrays_in_memory_give_the_files_product_one_of_each_too(cpu_client, tmp_path):
    a, b = _operands()
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    files = {"input_a": str(tmp_path / "a.npy"), "input_b": str(tmp_path / "b.npy")}
    from_files = daskgpu.run("matmul-pipeline", cpu_client, chunks=CHUNKS, **files)
    for given in ({"input_a": a, "input_b": b},
                  {"input_a": dask.array.from_array(a, chunks=(64, 70)),
                   "input_b": files["input_b"]},
                  {"input_a": files["input_a"], "input_b": b}):
        in_hand = daskgpu.run("matmul-pipeline", cpu_client, chunks=CHUNKS, verify="full",
                              **given)
        assert in_hand.verified, in_hand.verification
        for name in ("frobenius_norm", "sum"):
            assert in_hand.value[name] == from_files.value[name]
            assert type(in_hand.value[name]) is float
        assert sorted(in_hand.value) == ["frobenius_norm", "product", "sum"]
        assert type(in_hand.value["product"]) is type(from_files.value["product"])
        assert in_hand.data["dtype"] == "float64"
        for name, value in given.items():
            shown = value if isinstance(value, str) else (
                f"{'numpy.ndarray' if isinstance(value, np.ndarray) else 'dask.array.Array'} "
                f"{value.dtype} ({value.shape[0]}, {value.shape[1]})")
            assert in_hand.params[name] == shown
    c = a @ b.astype(np.float64)
    assert from_files.value["frobenius_norm"] == pytest.approx(np.sqrt((c**2).sum()),
                                                               rel=1e-12)


@pytest.mark.parametrize(("given", "kind", "message"), [
    ({"input_a": np.zeros((4, 3)), "input_b": dask.array.zeros((5, 2), chunks=2)}, ValueError,
     "--input-a numpy.ndarray float64 (4, 3) is 4 x 3 and --input-b dask.array.Array float64 "
     "(5, 2) is 5 x 2: shape mismatch, A's columns must equal B's rows"),
    ({"input_a": np.zeros((4, 3), dtype=np.int16), "input_b": np.zeros((3, 2))}, ValueError,
     "--input-a numpy.ndarray int16 (4, 3): holds int16 values; a numeric array of float32 or "
     "float64 is needed"),
    ({"input_a": np.zeros((4, 3)), "input_b": np.zeros(3)}, ValueError,
     "--input-b numpy.ndarray float64 (3,): holds an array of shape (3,); a matrix (2 axes)"),
    ({"input_a": np.zeros((4, 3)), "input_b": [[1.0, 2.0]] * 3}, TypeError,
     "--input-b: a list is not an input daskgpu reads"),
    ({"input_a": np.zeros((4, 3))}, ValueError, "--input-b: missing"),
])
def test_operands_it_cannot_multiply_are_refused_in_one_line_by_kind(given, kind, message):
    with pytest.raises(kind) as caught:
        daskgpu.get_pipeline("matmul-pipeline").resolve(CPU2, **given)
    assert isinstance(caught.value, daskgpu.DaskGPUError)
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)
