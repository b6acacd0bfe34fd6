"""fft-pipeline's spectrum kept on the workers: the transform's own, in natural order, once.

fft-pipeline runs through its ``drive`` (stages kept one after another, the layout picked on
the cluster), so the spectrum exists only once the drive has made it. A run that keeps it
(``workload.keep``) finds it in ``workload.on_workers["spectrum"]`` after the drive: a Dask
array on the blocks the transforms made. These tests drive the workload as the runner does.
"""

from __future__ import annotations

import json

import dask
import dask.array
import numpy as np
import pytest
from conftest import drive_as_runner, verify_on

import daskgpu
from daskgpu.execution import report, runner
from daskgpu.toolkit import registry
from pipelines.fft import layout as fft_layout
from pipelines.fft import stages as fft_stages
from pipelines.fft import tasks as fft_tasks

LAYOUTS = ("slabs", "whole")
_COLUMNS, _WHOLE = fft_tasks.along_columns, fft_tasks.whole
transforms: list[str] = []  # the transforms the workers (threads of this process) ran


def _counted_columns(block, **options):
    transforms.append("columns")
    return _COLUMNS(block, **options)


def _counted_whole(plan):
    transforms.append("whole")
    return _WHOLE(plan)


def _driven(session, keep: bool, **params):
    return drive_as_runner(session, "fft-pipeline", keep, **params)


def _kept(workload) -> dask.array.Array:
    """The kept spectrum: a Dask array whose graph is only its persisted blocks."""
    spectrum = workload.on_workers["spectrum"]
    assert isinstance(spectrum, dask.array.Array)
    assert len(dict(spectrum.__dask_graph__())) == spectrum.npartitions
    return spectrum


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_kept_spectrum_is_the_runs_own_transform_made_once(in_process_client,
                                                                monkeypatch, layout):
    monkeypatch.setattr(fft_tasks, "along_columns", _counted_columns)
    monkeypatch.setattr(fft_tasks, "whole", _counted_whole)
    params = {"shape": (48, 40), "chunks": 12, "seed": 3, "layout": layout}
    once = ["whole"] if layout == "whole" else ["columns"] * 4  # 4 slabs
    transforms.clear()
    spec, workload, raw = _driven(in_process_client, True, **params)
    assert transforms == once
    spectrum = _kept(workload)
    assert spectrum.shape == (48, 40) and spectrum.dtype == np.complex128
    values = spectrum.compute(scheduler=in_process_client.client)
    assert transforms == once  # read from the workers, not transformed again
    for depth in ("fast", "full"):
        assert verify_on(in_process_client, spec, workload, raw, depth).ok
    # The run's reported sum of squares and largest cell are those of the kept spectrum.
    present = workload.present(workload, raw)
    power = np.abs(values) ** 2
    assert present["sum_of_squares"] == pytest.approx(float(power.sum()), rel=1e-12)
    flat = int(np.argmax(power))
    assert present["max_at"] == [flat // 40, flat % 40]

    transforms.clear()  # not kept: as many transforms, nothing on the workers
    _, light, _ = _driven(in_process_client, False, **params)
    assert transforms == once and light.on_workers == {}


def test_the_command_lines_json_holds_no_array(in_process_client):
    spec = registry.get("fft-pipeline")
    result = runner.execute(spec, in_process_client, spec.resolve(
        in_process_client.backend, shape=(32, 24), chunks=8, seed=1))
    assert result.verified
    assert set(json.loads(report.as_json(result))["value"]) == {
        "sum_of_squares", "max_magnitude", "max_at"}


def _generated(session, params: dict) -> np.ndarray:
    """The run's generated input, drawn here as its blocks draw it."""
    resolved = registry.get("fft-pipeline").resolve(session.backend, **params)
    sizes = fft_layout.layout(resolved)
    return fft_stages.input_array(resolved, sizes).compute(scheduler="sync")


_RNG = np.random.default_rng(17)
_REAL = _RNG.standard_normal((36, 30)).astype(np.float32)
_HALF = np.fft.rfft2(_RNG.standard_normal((36, 30))).astype(np.complex64)

# name: (params, the input, NumPy's transform of it, the spectrum's dtype)
CASES = {
    "fft2 generated": ({"shape": (40, 36), "seed": 5}, None, np.fft.fft2, np.complex128),
    "ifft2 generated complex64": ({"shape": (40, 36), "seed": 6, "dtype": "complex64",
                                   "inverse": True}, None, np.fft.ifft2, np.complex64),
    "rfft2 of a NumPy array": ({"input": _REAL, "real": True}, _REAL, np.fft.rfft2,
                               np.complex64),
    "irfft2 of a Dask array": ({"input": dask.array.from_array(_HALF, chunks=(7, 16)),
                                "real": True, "inverse": True, "shape": (36, 30)}, _HALF,
                               lambda x: np.fft.irfft2(x, s=(36, 30)), np.float32),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_transform_is_kept_as_numpy_gives_it(in_process_client, case, layout):
    params, given, transform, dtype = CASES[case]
    params = {**params, "chunks": 9, "layout": layout}
    _, workload, _ = _driven(in_process_client, True, **params)
    spectrum = _kept(workload)
    data = _generated(in_process_client, params) if given is None else given
    expected = transform(data.astype(np.complex128 if data.dtype.kind == "c" else np.float64))
    assert spectrum.shape == expected.shape and spectrum.dtype == dtype
    got = spectrum.compute(scheduler=in_process_client.client)
    assert isinstance(got, np.ndarray) and got.dtype == dtype
    eps = np.finfo(dtype).eps
    scale = np.abs(expected).max()
    np.testing.assert_allclose(got, expected, rtol=0, atol=64 * eps * scale)
    assert type(workload.on_workers["spectrum"]) is dask.array.Array  # generated or given


@pytest.mark.parametrize("layout", ["slabs", "whole"])
def test_from_python_the_value_holds_the_spectrum_on_the_workers(cpu_client, layout):
    x = np.random.default_rng(4).random((64, 48))
    result = daskgpu.run("fft-pipeline", cpu_client, input=x, layout=layout)
    spectrum = result.value["spectrum"]
    assert isinstance(spectrum, dask.array.Array) and spectrum.shape == (64, 48)
    assert spectrum.dtype == np.complex128 and result.verified
    got = spectrum.compute(scheduler=cpu_client.client)
    assert np.allclose(got, np.fft.fft2(x), rtol=0, atol=1e-9)
