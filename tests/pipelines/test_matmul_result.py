"""matmul-pipeline's product from Python: a Dask array on the workers, computed once."""

from __future__ import annotations

import json

import dask
import dask.array
import dask.array.routines
import numpy as np
import pytest

import daskgpu
from daskgpu.execution import report, runner
from daskgpu.toolkit import registry
from pipelines.matmul import tasks as matmul_tasks

# C is 4 x 3 blocks of 50 x 60; the contraction (k = 160) whole (12 block products), or in
# three pieces (36, each block of C their sum).
SHAPE, CHUNKS, BLOCKS = (200, 160, 180), "50,60,60", 12
PRODUCTS = {"50,60": 12, "50,60,60": 36}

_MATMUL = dask.array.routines._matmul
computed: list[tuple] = []  # the block products the workers (threads of this process) made


def _counted_matmul(a, b):
    if a.size and b.size:  # not Dask's call on empty arrays for the result's type
        computed.append((a.shape, b.shape))
    return _MATMUL(a, b)


def _close_to(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``got`` within the rounding bound of a dot product of k terms: k eps (|A| |B|)."""
    k, eps = a.shape[1], np.finfo(got.dtype).eps
    bound = k * eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(got.astype(np.float64) - a.astype(np.float64) @ b.astype(np.float64))
                  <= bound)


def _kept(product, result) -> None:
    """A Dask array of C's shape and the run's dtype whose graph is only its persisted blocks."""
    assert isinstance(product, dask.array.Array)
    assert product.shape == (SHAPE[0], SHAPE[2]) and product.dtype == result.data["dtype"]
    assert product.numblocks == (4, 3)
    assert len(dict(product.__dask_graph__())) == BLOCKS


@pytest.mark.parametrize("chunks", sorted(PRODUCTS))
def test_from_python_the_product_is_kept_on_the_workers_and_computed_once(
        in_process_client, monkeypatch, chunks):
    monkeypatch.setattr(dask.array.routines, "_matmul", _counted_matmul)
    products = PRODUCTS[chunks]
    computed.clear()
    result = daskgpu.run("matmul-pipeline", in_process_client, shape=SHAPE, chunks=chunks,
                         seed=4)
    assert result.verified, result.verification
    assert len(computed) == products  # the compute shared the kept blocks: none made twice
    product = result.value["product"]
    _kept(product, result)
    c = product.compute(scheduler=in_process_client.client)
    assert isinstance(c, np.ndarray) and len(computed) == products  # read, not recomputed
    spec = registry.get("matmul-pipeline")
    resolved = spec.resolve(in_process_client.backend, shape=SHAPE, chunks=chunks, seed=4)
    a, b, _ = matmul_tasks.operands(resolved)
    a, b = dask.compute(a, b, scheduler="sync")
    _close_to(c, a, b)
    wide = c.astype(np.float64)
    assert np.sqrt((wide**2).sum()) == pytest.approx(result.value["frobenius_norm"], rel=1e-12)

    # The command line's run (runner.execute, nothing kept; other data, so that none of the
    # kept blocks is reused): as many products, no array in its JSON.
    computed.clear()
    line = runner.execute(spec, in_process_client, spec.resolve(
        in_process_client.backend, shape=SHAPE, chunks=chunks, seed=5))
    assert line.verified and len(computed) == products
    assert set(json.loads(report.as_json(line))["value"]) == {"frobenius_norm", "sum"}


def _operands() -> tuple[np.ndarray, np.ndarray]:
    """A float64, B float32 (the product float64)."""
    rng = np.random.default_rng(31)
    return (rng.standard_normal(SHAPE[:2]),
            rng.standard_normal(SHAPE[1:]).astype(np.float32))


@pytest.mark.parametrize("kind", ["numpy", "dask"])
def test_arrays_in_hand_give_the_same_kind_of_value(in_process_client, kind):
    a, b = _operands()
    given = (a, b) if kind == "numpy" else (dask.array.from_array(a, chunks=(64, 70)),
                                             dask.array.from_array(b, chunks=(45, 180)))
    result = daskgpu.run("matmul-pipeline", in_process_client, input_a=given[0],
                         input_b=given[1], chunks=CHUNKS)
    assert result.verified, result.verification
    product = result.value["product"]
    _kept(product, result)
    assert product.dtype == np.float64
    _close_to(product.compute(scheduler=in_process_client.client), a, b)
    generated = daskgpu.run("matmul-pipeline", in_process_client, shape=SHAPE, chunks=CHUNKS,
                            dtype="float32", seed=2)
    assert generated.verified and generated.value["product"].dtype == np.float32
    assert ({name: type(v) for name, v in result.value.items()}
            == {name: type(v) for name, v in generated.value.items()})
