"""fft-pipeline on any n x m array: non-square, odd and prime sides, every transform kind,
both verification depths and their mutations, and the shapes it refuses."""

from __future__ import annotations

import copy
import json

import dask
import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import ParameterError
from daskgpu.toolkit.backends import Backend
from pipelines.fft import check as fft_check
from pipelines.fft import layout as fft_layout
from pipelines.fft import stages as fft_stages

SPEC = daskgpu.get_pipeline("fft-pipeline")
CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
DEPTHS = ("fast", "full")
# non-square (both ways), odd x even, prime x prime, one column
SHAPES = [(24, 40), (40, 23), (31, 29), (17, 1)]
KINDS = {"fft2": ({}, np.fft.fft2), "ifft2": ({"inverse": True}, np.fft.ifft2),
         "rfft2": ({"real": True}, np.fft.rfft2)}


def _transformed(layout: str = "slabs", **params):
    """The run's input and its spectrum, as the graph of ``layout`` computes them here."""
    resolved = SPEC.resolve(CPU2, layout="slabs", **params)
    sizes = fft_layout.layout(resolved)
    with dask.config.set(scheduler="sync"):
        x = fft_stages.input_array(resolved, sizes).compute()
        if layout == "slabs":
            z = fft_stages.transposed(fft_stages.rows_transformed(
                fft_stages.input_array(resolved, sizes), resolved, sizes), sizes)
            spectrum = fft_stages.columns_transformed(z, resolved, sizes).T.compute()
        else:
            certify = fft_stages.certificates(resolved, sizes)
            plan = fft_stages.whole_plan(resolved, sizes, certify, 2, keep=True)
            from pipelines.fft import tasks

            spectrum = tasks.whole(plan)["array"]
    return sizes, x, spectrum


@pytest.mark.parametrize("layout", ["slabs", "whole"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_any_shape_gives_numpys_transform(layout, shape, kind):
    params, transform = KINDS[kind]
    sizes, x, spectrum = _transformed(layout, shape=shape, chunks=7, seed=4, **params)
    assert x.shape == shape
    expected = transform(x)
    assert spectrum.shape == expected.shape == (shape[0], sizes["m"])
    assert np.abs(spectrum - expected).max() <= 1e-12 * np.abs(expected).max()


@pytest.mark.parametrize("shape", [(24, 40), (31, 29), (40, 23)])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_mutation_of_any_shape_is_caught_at_both_depths(cpu_client, shape, kind):
    params, _ = KINDS[kind]
    layout = "whole" if shape[0] % 2 else "slabs"
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", shape=shape, chunks=9,
                                            seed=6, layout=layout, **params)
    for depth in DEPTHS:
        check = verify_on(cpu_client, spec, workload, raw, depth)
        assert check.ok and "planted peaks" in check.detail, (depth, check.detail)
        for mutation in fft_check.MUTATIONS:
            altered = verify_on(cpu_client, spec, workload, mutation.alter(raw), depth)
            assert not altered.ok, (depth, mutation.name)
            assert mutation.named_in(altered.detail), (mutation.name, altered.detail)


@pytest.mark.parametrize(("shape", "layout"), [((23, 38), "slabs"), ((23, 39), "whole"),
                                               ((29, 31), "slabs")])
def test_irfft2_of_any_shape_as_numpy_reads_it_and_its_mutations(cpu_client, tmp_path, shape,
                                                                  layout):
    """A half spectrum r x (m/2+1) back to the r x m array ``--shape`` gives (s= of numpy)."""
    x = np.random.default_rng(shape[1]).standard_normal(shape)
    np.save(tmp_path / "X.npy", np.fft.rfft2(x))
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "X.npy"),
                         real=True, inverse=True, shape=shape, chunks=5, layout=layout,
                         output=str(tmp_path / "back.npy"))
    assert result.verified, result.verification
    back = np.load(tmp_path / "back.npy")
    assert back.shape == shape and back.dtype == np.float64
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-12)
    flat = int(np.argmax(np.abs(back)))
    assert result.value["max_at"] == [flat // shape[1], flat % shape[1]]
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", real=True,
                                            inverse=True, shape=shape, chunks=5, layout=layout,
                                            input=str(tmp_path / "X.npy"))
    for depth in DEPTHS:
        assert verify_on(cpu_client, spec, workload, raw, depth).ok
        for mutation in fft_check.MUTATIONS:
            if mutation.name == "the spectrum conjugated":
                continue  # a real result: conjugating it changes nothing
            check = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                              depth)
            assert not check.ok, (depth, mutation.name)


@pytest.mark.parametrize(("params", "error", "fragment"), [
    ({"shape": "0,5"}, ParameterError, "--shape"),
    ({"shape": "4"}, ParameterError, "two sides"),
    ({"shape": "4,5,6"}, ParameterError, "two sides"),
    ({"shape": "2e9,3e6"}, ParameterError, "PiB"),
    ({"shape": (4, 5), "size": 4}, ParameterError, "--size with --shape"),
    ({"shape": (1000000, 8), "chunks": 100}, ParameterError, "at most 1000 slabs"),
])
def test_shapes_no_run_can_use_are_refused(params, error, fragment):
    with pytest.raises(error, match=fragment):
        SPEC.resolve(CPU2, **params)


def test_shape_with_an_input_that_has_one_is_refused(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((4, 6)))
    with pytest.raises(ParameterError, match="--shape with --input"):
        SPEC.resolve(CPU2, input=str(tmp_path / "x.npy"), shape=(4, 6))
    assert fft_layout.layout(SPEC.resolve(CPU2, input=str(tmp_path / "x.npy")))["q"] == 6


def test_cli_refuses_a_bad_shape_in_one_line_with_exit_2(tmp_path):
    for args in (["--shape", "12,x"], ["--shape", "8,8", "--size", "8"]):
        proc = run_cli("run", "fft-pipeline", *args, "--cpu", "--no-dashboard", timeout=120)
        assert proc.returncode == 2, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    np.save(tmp_path / "X.npy", np.ones((8, 5), dtype=np.complex128))
    proc = run_cli("run", "fft-pipeline", "--input", str(tmp_path / "X.npy"), "--real",
                   "--inverse", "--shape", "8,12", "--cpu", "--no-dashboard",
                   "--output", str(tmp_path / "out.npy"), timeout=120)
    assert proc.returncode == 2 and "needs the 8 x 7 half spectrum" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.npy").exists()


def test_cli_shape_run_writes_what_np_load_reads_as_the_spectrum(tmp_path):
    out = tmp_path / "X.npy"
    proc = run_cli("run", "fft-pipeline", "--shape", "30,44", "--seed", "2", "--chunks", "8",
                   "--cpu", "--workers", "2", "--no-dashboard", "--json", "--output", str(out),
                   timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] and doc["data"]["shape"] == [30, 44]
    assert doc["data"]["spectrum"] == "30 x 44"
    written = np.load(out)  # a plain complex128 array, the spectrum as numpy.fft.fft2 gives it
    _, x, _ = _transformed(shape=(30, 44), chunks=8, seed=2)
    assert written.shape == (30, 44) and written.dtype == np.complex128
    np.testing.assert_allclose(written, np.fft.fft2(x), rtol=0, atol=1e-9)
