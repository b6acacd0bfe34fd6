"""fft-pipeline's irfft2 (``--inverse --real``): the half spectrum back to the real array."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit.backends import Backend
from pipelines.fft import check as fft_check
from pipelines.fft import layout as fft_layout

SPEC = daskgpu.get_pipeline("fft-pipeline")
CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)


@pytest.mark.parametrize(("n", "chunks"), [(32, 5), (33, 7)])
def test_a_half_spectrum_transforms_back_to_its_array(cpu_client, tmp_path, n, chunks):
    x = np.random.default_rng(n).standard_normal((n, n))
    np.save(tmp_path / "x.npy", x)
    daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "x.npy"), real=True,
                output=str(tmp_path / "X.npy"))
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "X.npy"),
                         real=True, inverse=True, chunks=chunks, shape=(n, n),
                         output=str(tmp_path / "back.npy"))
    assert result.verified, result.verification
    assert result.data["transform"] == "irfft2" and result.data["shape"] == [n, n // 2 + 1]
    back = np.load(tmp_path / "back.npy")
    assert back.shape == (n, n) and back.dtype == np.float64
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-12)
    flat = int(np.argmax(np.abs(back)))
    assert result.value["max_at"] == [flat // n, flat % n]  # the result's cell, not transposed
    assert result.value["sum_of_squares"] == pytest.approx(float((back**2).sum()), rel=1e-12)


def test_a_half_spectrum_that_is_not_hermitian_reads_as_numpy_reads_it(cpu_client, tmp_path):
    """Columns 0 and n/2 count only with their Hermitian part, as numpy.fft.irfft2 takes them."""
    rng = np.random.default_rng(4)
    half = rng.standard_normal((24, 13)) + 1j * rng.standard_normal((24, 13))
    np.save(tmp_path / "h.npy", half.astype(np.complex64))
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(tmp_path / "h.npy"),
                         real=True, inverse=True, chunks=4, output=str(tmp_path / "out.zarr"))
    assert result.verified, result.verification
    import zarr

    written = zarr.open_array(str(tmp_path / "out.zarr"), mode="r")[:]
    assert written.dtype == np.float32
    expected = np.fft.irfft2(half.astype(np.complex64).astype(np.complex128), s=(24, 24))
    np.testing.assert_allclose(written, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("depth", ["fast", "full"])
def test_every_mutation_of_an_irfft2_result_is_caught(cpu_client, tmp_path, depth):
    np.save(tmp_path / "X.npy", np.fft.rfft2(np.random.default_rng(3).standard_normal((40, 40))))
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", real=True,
                                            inverse=True, input=str(tmp_path / "X.npy"),
                                            chunks=6)
    assert verify_on(cpu_client, spec, workload, raw, depth).ok
    for mutation in fft_check.MUTATIONS:
        if mutation.name == "the spectrum conjugated":
            continue  # the result is real: conjugating changes nothing
        check = verify_on(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)),
                          depth)
        assert not check.ok, mutation.name
        assert mutation.named_in(check.detail), (mutation.name, check.detail)


def test_irfft2_needs_a_half_spectrum_input(tmp_path):
    with pytest.raises(ParameterError, match="irfft2.*--input"):
        SPEC.resolve(CPU2, real=True, inverse=True, size=16)
    np.save(tmp_path / "half.npy", np.ones((8, 5), dtype=np.complex128))
    half = str(tmp_path / "half.npy")
    with pytest.raises(InputFileError, match=r"--shape 8,12 \(irfft2's result\) needs the 8 x 7"):
        SPEC.resolve(CPU2, real=True, inverse=True, input=half, shape=(8, 12))
    with pytest.raises(InputFileError, match=r"--shape 9,8 .* needs the 9 x 5"):
        SPEC.resolve(CPU2, real=True, inverse=True, input=half, shape=(9, 8))
    np.save(tmp_path / "one.npy", np.ones((8, 1), dtype=np.complex128))
    with pytest.raises(InputFileError, match="give the result's shape with --shape"):
        SPEC.resolve(CPU2, real=True, inverse=True, input=str(tmp_path / "one.npy"))
    np.save(tmp_path / "flat.npy", np.ones(9, dtype=np.complex128))
    with pytest.raises(InputFileError, match="2 axes"):
        SPEC.resolve(CPU2, real=True, inverse=True, input=str(tmp_path / "flat.npy"))
    # as numpy.fft.irfft2 reads it: 8 x 8 by default, or the odd 8 x 9 that --shape asks for
    for shape, columns in ((None, 8), ((8, 9), 9), ((8, 8), 8)):
        resolved = SPEC.resolve(CPU2, real=True, inverse=True, input=half, shape=shape)
        assert fft_layout.layout(resolved)["n"] == columns  # the result's columns
    with pytest.raises(InputFileError, match=r"2 axes"):
        SPEC.resolve(CPU2, real=True, inverse=True, input=str(tmp_path / "flat.npy"),
                     shape=(9, 9))


def test_cli_irfft2_run_and_bench_agree_with_numpy(tmp_path):
    x = np.random.default_rng(6).standard_normal((48, 48))
    np.save(tmp_path / "X.npy", np.fft.rfft2(x))
    proc = run_cli("run", "fft-pipeline", "--input", str(tmp_path / "X.npy"), "--real",
                   "--inverse", "--chunks", "9", "--cpu", "--workers", "2", "--no-dashboard",
                   "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] and doc["data"]["transform"] == "irfft2"
    flat = int(np.argmax(np.abs(x)))
    assert doc["value"]["max_at"] == [flat // 48, flat % 48]
    proc = run_cli("bench", "fft-pipeline", "--input", str(tmp_path / "X.npy"), "--real",
                   "--inverse", "--cpu", "--workers", "2", "--repeat", "1", "--warmup", "0",
                   "--quiet", "--json", str(tmp_path / "bench.json"), timeout=120)
    assert proc.returncode == 0, proc.stderr  # the baseline's irfft2 agreed with the run
    measured = json.loads((tmp_path / "bench.json").read_text())["measurements"][0]
    assert measured["verified"] and measured["baseline_s"] > 0


def test_the_real_inverse_block_on_the_array_module_path(cupy_stand_in):
    """irfft2's last stage as on GPU workers (cupy.fft.irfft; the strict CuPy stand-in): the
    NumPy branch's values, in device memory."""
    from pipelines.fft import tasks as fft_blocks

    rng = np.random.default_rng(2)
    rows = rng.standard_normal((5, 9)) + 1j * rng.standard_normal((5, 9))
    for n in (16, 17):
        out = fft_blocks.along_columns(cupy_stand_in.asarray(rows), library="cupy",
                                       value_type="float32", real_length=n)
        assert isinstance(out, cupy_stand_in.ndarray)
        assert out.shape == (5, n) and out.dtype == np.float32
        np.testing.assert_array_equal(out.get(), fft_blocks.along_columns(
            rows, value_type="float32", real_length=n))
        np.testing.assert_allclose(out.get(), np.fft.irfft(rows, n=n, axis=1), rtol=0,
                                   atol=1e-6)


def test_a_fault_in_irfft2s_last_stage_fails_both_depths(in_process_client, monkeypatch,
                                                         tmp_path):
    """One of ten row slabs of the result inverted with its twiddles 0.2 % off: both fail."""
    from pipelines.fft import tasks as fft_blocks

    np.save(tmp_path / "X.npy", np.fft.rfft2(np.random.default_rng(5).standard_normal((60, 60))))
    params = {"real": True, "inverse": True, "input": str(tmp_path / "X.npy"), "chunks": 6}
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **params)
    for depth in ("fast", "full"):
        assert verify_on(in_process_client, spec, workload, raw, depth).ok
    inverse = fft_blocks.along_columns

    def faulty(block, block_info=None, **kwargs):
        if kwargs.get("real_length") and block_info[0]["chunk-location"][0] == 4:
            twisted = block.copy()
            twisted[:, 1::2] *= np.exp(1j * 0.002)
            return inverse(twisted, **kwargs)
        return inverse(block, **kwargs)

    monkeypatch.setattr(fft_blocks, "along_columns", faulty)
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **params)
    for depth in ("fast", "full"):
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"
