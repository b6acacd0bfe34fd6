"""fft-pipeline: stages against numpy.fft, runs on a CPU cluster, inputs, outputs, refusals."""

from __future__ import annotations

import json
import re

import dask
import numpy as np
import pytest
from conftest import compute_as_runner, run_cli, verify_on

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.toolkit import params
from daskgpu.toolkit.backends import Backend
from pipelines.fft import check as fft_check
from pipelines.fft import check_replay as fft_check_replay
from pipelines.fft import layout as fft_layout
from pipelines.fft import shared as fft_data
from pipelines.fft import stages as fft_stages
from pipelines.fft import tasks as fft_blocks

CPU2 = Backend("cpu", "numpy", "pandas", workers=2, threads=2)
SPEC = daskgpu.get_pipeline("fft-pipeline")
DEPTHS = ("fast", "full")


def _context(**given) -> fft_data.FFTContext:
    """A check's context of generated complex data (as prepare builds it), ``given`` changed."""
    fields = {"n": 30, "q": 30, "m": 30, "real": False, "half_inverse": False, "inverse": False,
              "dtype": "complex128", "seed": 5, "row_chunks": (12, 12, 6), "col_chunks": (30,),
              "library": "numpy", **given}
    return fft_data.FFTContext(**fields)


def _stages(**params):
    """The run's input and its spectrum, computed here stage by stage (sync scheduler)."""
    resolved = SPEC.resolve(CPU2, **params)
    sizes = fft_layout.layout(resolved)
    with dask.config.set(scheduler="sync"):
        x = fft_stages.input_array(resolved, sizes)
        y = fft_stages.rows_transformed(x, resolved, sizes)
        z = fft_stages.transposed(y, sizes)
        spectrum_t = fft_stages.columns_transformed(z, resolved, sizes)
        return resolved, sizes, x.compute(), spectrum_t.T.compute(), spectrum_t.chunks


@pytest.mark.parametrize(("params", "transform"), [
    ({}, np.fft.fft2),
    ({"inverse": True}, np.fft.ifft2),
    ({"real": True}, np.fft.rfft2),
    ({"dtype": "complex64"}, np.fft.fft2),
    ({"real": True, "dtype": "complex64"}, np.fft.rfft2),
])
def test_the_stages_give_numpys_transform_on_uneven_blocks(params, transform):
    _, sizes, x, spectrum, chunks = _stages(size=37, chunks=10, seed=4, **params)
    assert sizes["row_chunks"][0] == (10, 10, 10, 7)  # uneven slabs
    assert len(chunks[0]) == 4 and sum(chunks[0]) == spectrum.shape[1]
    expected = transform(x.astype(np.complex128) if not params.get("real") else
                         x.astype(np.float64))
    assert spectrum.shape == expected.shape == (37, 19 if params.get("real") else 37)
    assert spectrum.dtype == np.dtype(params.get("dtype", "complex128"))
    tol = 1e-4 if params.get("dtype") == "complex64" else 1e-12
    assert np.abs(spectrum - expected).max() <= tol * np.abs(expected).max()


def test_generated_input_is_the_documented_signal():
    """The run's blocks (outer products) equal the check's (its own sums of waves)."""
    resolved, sizes, x, _, _ = _stages(size=40, chunks=12, seed=7)
    ctx = _context(n=40, q=40, m=40, seed=7, row_chunks=sizes["row_chunks"][0])
    again = np.concatenate([fft_check_replay.input_rows(ctx, i, np.arange(h))
                            for i, h in enumerate(ctx.row_chunks)])
    assert np.abs(x - again).max() < 1e-12
    spec = fft_data.signal(7, 40, False)
    assert len(spec["u"]) == fft_data.PEAKS
    noise = x - sum(a * np.exp(1j * (2 * np.pi * (u * np.arange(40)[:, None]
                                                  + v * np.arange(40)[None, :]) / 40 + p))
                    for u, v, a, p in zip(spec["u"], spec["v"], spec["amplitude"],
                                          spec["phase"], strict=True))
    assert 0 < np.abs(noise.real).max() <= fft_data.NOISE
    assert 0 < np.abs(noise.imag).max() <= fft_data.NOISE


def test_a_real_signal_shows_one_peak_per_cosine_in_the_half_spectrum():
    spec = fft_data.signal(3, 64, True)
    assert ((spec["v"] >= 1) & (spec["v"] <= 31)).all()
    assert len(set(zip(spec["u"].tolist(), spec["v"].tolist(), strict=True))) == fft_data.PEAKS
    assert len(fft_data.signal(3, 2, True)["u"]) == 0  # no room for a cosine: noise only


def test_summary_reduces_a_block_to_its_squares_peaks_and_cells():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((9, 5)) + 1j * rng.standard_normal((9, 5))
    x[4, 2] = 50 + 5j
    rows, cols = np.array([4, 0, 8]), np.array([2, 1, 7])  # the last cell is in another block
    width = fft_blocks.summary_width((5, 3), len(rows))
    info = {0: {"array-location": [(0, 5), (0, 9)]}}
    packed = fft_blocks.summary(x.T.copy(), info, rows=rows, cols=cols, width=width)
    rest = np.full((9, 3), 0.5 + 0j)  # columns 5 to 7 of the spectrum
    other = fft_blocks.summary(rest.T.copy(), {0: {"array-location": [(5, 8), (0, 9)]}},
                               rows=rows, cols=cols, width=width)
    result = fft_blocks.assemble(np.concatenate([packed, other]), (5, 3), len(rows))
    np.testing.assert_allclose(result["column_squares"], [*(np.abs(x) ** 2).sum(axis=0),
                                                          2.25, 2.25, 2.25])
    assert result["sum_of_squares"] == pytest.approx((np.abs(x) ** 2).sum() + 6.75)
    top = int(np.argmax(np.abs(result["peak_values"])))
    assert (result["peak_rows"][top], result["peak_cols"][top]) == (4, 2)
    assert result["peak_values"][top] == 50 + 5j
    assert len(result["peak_rows"]) == 2 * fft_data.TOP
    assert set(result["peak_cols"][fft_data.TOP:]) <= {5, 6, 7}
    np.testing.assert_array_equal(result["samples"], [x[4, 2], x[0, 1], 0.5])


def test_gpu_branches_draw_reduce_and_check_alike(cupy_stand_in):
    """The array-module path on CuPy (the strict stand-in; an integer-seeded generator): each
    step gives what the NumPy branch gives for the same block."""
    cupy = cupy_stand_in
    info = {None: {"array-location": [(12, 24), (0, 30)], "chunk-location": (1, 0)}}
    x = fft_blocks.generated(info, n=30, seed=5, library="cupy")
    assert isinstance(x, cupy.ndarray) and x.dtype == np.complex128
    host = x.get()
    assert not np.array_equal(host, fft_blocks.generated(info, n=30, seed=5))  # another generator
    ctx = _context(library="cupy")
    np.testing.assert_allclose(fft_check_replay.input_rows(ctx, 1, np.arange(12), cupy).get(),
                               host, rtol=0, atol=1e-12)
    assert len(cupy.seeds) == 2 and cupy.seeds[0] == cupy.seeds[1]
    cut = fft_blocks.piece(x, 3, 8, "cupy")
    assert isinstance(cut, cupy.ndarray) and cut.flags.c_contiguous and cut.shape == (5, 12)
    np.testing.assert_array_equal(cut.get(), fft_blocks.piece(host, 3, 8))
    np.testing.assert_array_equal(fft_blocks.joined([cut, cut], "cupy").get(),
                                  np.concatenate([host[:, 3:8].T] * 2, axis=1))
    spectrum_t = fft_blocks.along_columns(x, library="cupy")
    np.testing.assert_allclose(spectrum_t.get(), fft_blocks.along_columns(host), rtol=1e-12)
    np.testing.assert_allclose(fft_blocks.along_rows(x, "cupy").get(),
                               fft_blocks.along_rows(host), rtol=1e-12)
    rows, cols = np.array([3, 7]), np.array([13, 2])
    where = {0: {"array-location": [(12, 24), (0, 30)]}}
    width = fft_blocks.summary_width((12,), 2)
    np.testing.assert_array_equal(
        fft_blocks.summary(spectrum_t, where, "cupy", rows, cols, width),
        fft_blocks.summary(spectrum_t.get(), where, "numpy", rows, cols, width))


def test_transpose_bytes_count_what_leaves_each_block():
    sizes = {"row_chunks": ((3, 3, 2),), "col_chunks": ((8,), (3, 3, 2)), "n": 8, "m": 8,
             "dtype": np.dtype("complex128")}
    assert fft_layout.transpose_bytes(sizes) == (64 - 9 - 9 - 4) * 16


@pytest.mark.parametrize("layout", ["slabs", "whole"])
def test_a_run_reports_its_phases_and_matches_numpy(cpu_client, layout):
    result = daskgpu.run("fft-pipeline", client=cpu_client, size=48, chunks=13, seed=2,
                         inverse=True, layout=layout)
    assert result.verified, result.verification
    assert "Parseval" in result.verification and "planted peaks" in result.verification
    data = result.data
    assert data["transform"] == "ifft2" and data["slabs"] == 4 and data["layout"] == layout
    for key in ("input_s", "row_fft_s", "column_fft_s", "reduce_s"):
        assert data[key] > 0, key
    assert data["local_fft_s"] == pytest.approx(data["row_fft_s"] + data["column_fft_s"],
                                                abs=2e-4)
    if layout == "slabs":
        assert data["transpose_s"] > 0 and data["threads_per_transform"] == 1
        assert data["transpose_bytes"] == 48 * 48 * 16 - (13 * 12 * 3 + 9 * 12) * 16
        assert data["transpose_gb_per_s"] > 0
    else:  # the columns are transformed where they lie: nothing moves between blocks
        assert data["transpose_s"] == 0 and data["transpose_bytes"] == 0
        assert data["transpose_gb_per_s"] is None
        assert data["threads_per_transform"] == 2  # both workers' threads, on one host
    _, _, x, _, _ = _stages(size=48, chunks=13, seed=2, inverse=True)
    expected = np.fft.ifft2(x)
    assert result.value["sum_of_squares"] == pytest.approx((np.abs(expected) ** 2).sum(),
                                                           rel=1e-12)
    flat = int(np.argmax(np.abs(expected)))
    assert result.value["max_at"] == [flat // 48, flat % 48]


def test_a_npy_input_is_transformed_and_written(cpu_client, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((30, 30)).astype(np.float32)
    source, out = tmp_path / "x.npy", tmp_path / "spectrum.npy"
    np.save(source, x)
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(source), chunks=8,
                         real=True, output=str(out))
    assert result.verified, result.verification
    assert "no planted peaks" in result.verification
    assert result.params["dtype"] == "complex64" and result.data["format"] == "npy"
    written = np.load(out)
    assert written.shape == (30, 16) and written.dtype == np.complex64
    np.testing.assert_allclose(written, np.fft.rfft2(x), rtol=0, atol=1e-4 * 30)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spectrum.npy", "x.npy"]


@pytest.mark.parametrize("dtype", ["complex128", "complex64"])
def test_a_complex_input_is_transformed_and_verified(cpu_client, tmp_path, dtype):
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((24, 24)) + 1j * rng.standard_normal((24, 24))).astype(dtype)
    source, out = tmp_path / "x.npy", tmp_path / "spectrum.npy"
    np.save(source, x)
    result = daskgpu.run("fft-pipeline", client=cpu_client, input=str(source), chunks=7,
                         output=str(out))
    assert result.verified, result.verification
    assert result.params["dtype"] == dtype
    written = np.load(out)
    assert written.dtype == np.dtype(dtype)
    tol = 1e-4 * 24 if dtype == "complex64" else 1e-10
    np.testing.assert_allclose(written, np.fft.fft2(x.astype(np.complex128)), rtol=0, atol=tol)


@pytest.mark.parametrize("depth", DEPTHS)
def test_every_mutation_of_an_input_run_is_caught(cpu_client, tmp_path, depth):
    """Without planted peaks, the reported maximum is checked against its DFT sum."""
    rng = np.random.default_rng(10)
    np.save(tmp_path / "x.npy", rng.standard_normal((36, 36)) + 1j * rng.standard_normal((36, 36)))
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline",
                                            input=str(tmp_path / "x.npy"), chunks=10)
    check = verify_on(cpu_client, spec, workload, raw, depth)
    assert check.ok and "3 largest reported cells agree" in check.detail, check.detail
    for mutation in fft_check.MUTATIONS:
        altered = verify_on(cpu_client, spec, workload, mutation.alter(raw), depth)
        assert not altered.ok, mutation.name
        assert mutation.named_in(altered.detail), (mutation.name, altered.detail)


def test_a_written_spectrum_transforms_back_to_its_input(cpu_client, tmp_path):
    """--output of a forward run is the --input of an inverse one: the round trip is exact."""
    x = np.random.default_rng(9).standard_normal((32, 32))
    image, spectrum, back = tmp_path / "x.npy", tmp_path / "X.zarr", tmp_path / "back.npy"
    np.save(image, x)
    forward = daskgpu.run("fft-pipeline", client=cpu_client, input=str(image), chunks=10,
                          output=str(spectrum))
    inverse = daskgpu.run("fft-pipeline", client=cpu_client, input=str(spectrum), chunks=10,
                          inverse=True, output=str(back))
    assert forward.verified and inverse.verified, inverse.verification
    assert inverse.data["transform"] == "ifft2" and inverse.data["format"] == "zarr"
    np.testing.assert_allclose(np.load(back), x, rtol=0, atol=1e-12)


@pytest.mark.parametrize("depth", DEPTHS)
def test_a_wrong_spectrum_fails_verification(cpu_client, depth):
    """A real fault in the computation (columns transformed the wrong way) is caught."""
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", size=40, chunks=11,
                                            seed=3)
    assert verify_on(cpu_client, spec, workload, raw, depth).ok
    forward = workload.resolved
    inverse = spec.resolve(cpu_client.backend, size=40, chunks=11, seed=3, inverse=True)
    sizes = fft_layout.layout(inverse)  # the same input, transformed the other way
    certify = fft_stages.certificates(forward, fft_layout.layout(forward))  # as asked
    with dask.config.set(scheduler="sync"):
        x = fft_stages.input_array(inverse, sizes)
        y = fft_stages.rows_transformed(x, inverse, sizes)
        wrong = fft_stages.columns_transformed(fft_stages.transposed(y, sizes), inverse, sizes)
        bad = dask.compute({**fft_stages.reduced(wrong, inverse, certify),
                            "lines": fft_stages.input_lines(x, y, forward, sizes, certify)})[0]
    check = verify_on(cpu_client, spec, workload, bad, depth)
    # both depths: the row transforms' certified values at the sampled cells' columns differ
    assert not check.ok and "its transform at sampled cell" in check.detail, check.detail
    # the wrong spectrum beside the run's right certificates: Parseval's identity fails
    check = verify_on(cpu_client, spec, workload, {**bad, "lines": raw["lines"]}, depth)
    assert not check.ok and "Parseval" in check.detail, check.detail


def test_cli_json_run_of_the_half_spectrum_writes_zarr(tmp_path):
    out = tmp_path / "s.zarr"
    proc = run_cli("run", "fft-pipeline", "--size", "40", "--chunks", "16", "--real", "--seed",
                   "6", "--cpu", "--workers", "2", "--no-dashboard", "--json", "--output",
                   str(out), "--layout", "slabs", timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["verified"] and doc["params"]["real"] is True and doc["params"]["inverse"] is False
    assert doc["data"]["transform"] == "rfft2" and doc["data"]["spectrum"] == "40 x 21"
    assert doc["throughput"]["flop_per_s"] > 0 and doc["data"]["transpose_bytes"] > 0
    import zarr

    written = zarr.open_array(str(out), mode="r")[:]
    _, _, x, _, _ = _stages(size=40, chunks=16, seed=6, real=True)
    np.testing.assert_allclose(written, np.fft.rfft2(x), rtol=0, atol=1e-9)
    assert doc["value"]["sum_of_squares"] == pytest.approx(
        float((np.abs(written) ** 2).sum()), rel=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]  # no temporary left


@pytest.mark.parametrize(("params", "error", "fragment"), [
    ({"inverse": True, "real": True}, ParameterError, "irfft2"),
    ({"size": 64, "chunks": "8,8"}, ParameterError, "one slab width"),
    ({"size": 10**6, "chunks": 100}, ParameterError, "at most 1000 slabs"),
    ({"size": 2**40}, ParameterError, "PiB"),
    ({"real": "maybe"}, ParameterError, "--real"),
])
def test_layouts_and_options_no_run_can_use_are_refused(monkeypatch, params, error, fragment):
    """Refused up front: nothing sized, laid out, built or drawn first (a call log of them)."""
    called = []

    def logged(name, original):
        def call(*args, **kwargs):
            called.append(name)
            return original(*args, **kwargs)
        return call

    for module, names in ((fft_layout, ("default_size", "layout", "whole_bytes", "pick")),
                          (fft_stages, ("input_array", "certificates", "rows_transformed",
                                        "transposed", "columns_transformed", "whole_parts")),
                          (fft_blocks, ("generated", "along_rows", "along_columns", "whole")),
                          (fft_data, ("signal", "sampled_cells", "projection_transform"))):
        for name in names:
            monkeypatch.setattr(module, name, logged(name, getattr(module, name)))
    with pytest.raises(error, match=fragment):
        SPEC.resolve(CPU2, **params)
    assert called == []
    SPEC.workload(CPU2, size=16, chunks=8, seed=1)  # the log sees a run's build
    assert {"layout", "certificates", "input_array", "rows_transformed"} <= set(called)


def test_chunks_larger_than_the_array_make_one_slab():
    resolved = SPEC.resolve(CPU2, size=20, chunks=1000, seed=1)
    sizes = fft_layout.layout(resolved)
    assert sizes["row_chunks"][0] == (20,) and sizes["col_chunks"][1] == (20,)


@pytest.mark.parametrize(("array", "fragment"), [
    (np.ones((4, 6, 2)), "a 2-D array"),
    (np.ones(16), "a 2-D array"),
    (np.ones((4, 4), dtype=np.int64), "float32 or float64"),
    (np.array([["a", "b"], ["c", "d"]]), "float32 or float64"),
])
def test_inputs_it_cannot_transform_are_refused(tmp_path, array, fragment):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(InputFileError, match=fragment):
        SPEC.resolve(CPU2, input=str(path))
    with pytest.raises(ParameterError, match="--size"):
        SPEC.resolve(CPU2, input=str(path), size=4)


def test_a_complex_input_with_real_is_refused_in_one_line(tmp_path):
    path = tmp_path / "z.npy"
    np.save(path, np.ones((8, 8), dtype=np.complex64))
    with pytest.raises(InputFileError, match="holds complex64 values; --real transforms real "
                       "data .*drop --real"):
        SPEC.resolve(CPU2, input=str(path), real=True)
    assert SPEC.resolve(CPU2, input=str(path))["dtype"] == "complex64"


def test_flags_read_as_switches():
    assert params.switch(True) is True and params.switch("off") is False
    with pytest.raises(ValueError):
        params.switch("2")



# --- depth fast: the run's certificates, and faults injected into the computing functions ------

def test_projection_transform_is_the_dft_of_the_weights_summed_directly():
    for n, m, inverse in [(1, 1, False), (8, 8, False), (9, 5, False), (16, 9, True),
                          (37, 37, True), (300, 151, False)]:
        s = fft_data.projection_weights(n, m, 5)
        sign = 1 if inverse else -1
        c, v = np.arange(n)[:, None], np.arange(m)[None, :]
        direct = (np.exp(sign * 2j * np.pi * ((c * v) % n) / n) * s).sum(axis=1)
        b = fft_data.projection_transform(n, m, 5, inverse)
        assert np.abs(b - direct).max() <= 1e-13 * max(1.0, np.abs(direct).max()), (n, m)
        assert np.abs(s).max() <= 1 and np.linalg.norm(b) == pytest.approx(
            np.sqrt(n) * np.linalg.norm(s), rel=1e-12)  # Parseval: b is W s


def test_the_certificates_are_what_they_say(cpu_client):
    """The input's rows times b, their transforms at the cells' columns, their squares, and
    X s by block."""
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", size=37, chunks=10,
                                            seed=4, real=True)
    _, sizes, x, spectrum, _ = _stages(size=37, chunks=10, seed=4, real=True)
    ctx = workload.context
    s = fft_data.projection_weights(37, 19, ctx.check_seed)
    b = fft_data.projection_transform(37, 19, ctx.check_seed, False)
    rows, cols = fft_data.sampled_cells(37, ctx.col_chunks, ctx.check_seed)
    lines = raw["lines"]
    k = 1 + len(cols)
    assert lines.shape == (37, 2 * k + 1)
    products = lines[:, :k] + 1j * lines[:, k:2 * k]
    np.testing.assert_allclose(products[:, 0], x @ b, rtol=1e-12)
    waves = np.exp(-2j * np.pi * np.outer(np.arange(37), cols) / 37)
    np.testing.assert_allclose(products[:, 1:], x @ waves, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(lines[:, -1], (x * x).sum(axis=1), rtol=1e-13)
    parts = raw["result"]["projection_parts"]
    assert parts.shape == (4, 37)  # one part of X s for each of the 4 column blocks
    np.testing.assert_allclose(parts.sum(axis=0), spectrum @ s, rtol=1e-12)
    check = verify_on(cpu_client, spec, workload, raw, "fast")
    assert check.ok and check.depth == "fast", check.detail
    assert "of 37 input rows checked again: a fault in at least 10 % of the input rows" \
        in check.detail and "of 37 spectrum rows checked again" in check.detail


def _certified(raw, lines=None, parts=None):
    result = dict(raw["result"])
    if parts is not None:
        result["projection_parts"] = parts
    return {**raw, "result": result, "lines": raw["lines"] if lines is None else lines}


@pytest.mark.parametrize(("alter", "needle"), [
    (lambda raw: _certified(raw, lines=raw["lines"][:-1]), "a block dropped"),
    (lambda raw: _certified(raw, lines=raw["lines"] * (1 + 1e-9)), "input row"),
    (lambda raw: _certified(raw, parts=raw["result"]["projection_parts"] * (1 + 1e-9)),
     "projection X s"),
    (lambda raw: _certified(raw, parts=raw["result"]["projection_parts"][:, :-1]),
     "projection parts shaped"),
], ids=["an input row dropped", "the input's certificates 1e-9 off",
        "the projection 1e-9 off", "a projection part short"])
def test_fast_fails_certificates_that_do_not_fit(cpu_client, alter, needle):
    spec, workload, raw = compute_as_runner(cpu_client, "fft-pipeline", size=96, chunks=40,
                                            seed=9)
    assert verify_on(cpu_client, spec, workload, raw, "fast").ok
    check = verify_on(cpu_client, spec, workload, alter(raw), "fast")
    assert not check.ok and needle in check.detail, check.detail


def test_the_certificates_on_the_array_module_path(cupy_stand_in):
    """The run's certificates and the check's rows as on GPU workers (the strict CuPy
    stand-in): the NumPy branch's values for the same block."""
    cupy = cupy_stand_in
    rng = np.random.default_rng(1)
    block = (rng.standard_normal((6, 16)) + 1j * rng.standard_normal((6, 16))).astype(
        np.complex64)
    b = fft_data.projection_transform(16, 16, 3, False)
    cols = np.array([2, 9])
    rows = np.fft.fft(block, axis=1)
    got = fft_blocks.line_terms(cupy.asarray(block), cupy.asarray(rows), n=16, transform=b,
                                cols=cols, library="cupy")
    np.testing.assert_array_equal(got, fft_blocks.line_terms(block, rows, n=16, transform=b,
                                                             cols=cols))
    wide = block.astype(np.complex128)
    np.testing.assert_allclose(got[:, 0] + 1j * got[:, 3], wide @ b, rtol=1e-12)
    np.testing.assert_array_equal(got[:, 1:3] + 1j * got[:, 4:6], rows[:, cols])
    np.testing.assert_allclose(got[:, 6], (np.abs(wide) ** 2).sum(axis=1), rtol=1e-12)
    weights = fft_data.projection_weights(16, 16, 3)
    where = {0: {"array-location": [(4, 10), (0, 16)]}}
    width = fft_blocks.summary_width((6, 6, 4), 0, 16)
    packed = fft_blocks.summary(cupy.asarray(block), where, "cupy", (), (), width, weights)
    np.testing.assert_array_equal(packed, fft_blocks.summary(block, where, "numpy", (), (),
                                                             width, weights))
    at = width - 4 * fft_data.TOP - 32
    np.testing.assert_allclose(packed[0, at:at + 16] + 1j * packed[0, at + 16:at + 32],
                               weights[4:10] @ block.astype(np.complex128), rtol=1e-12)
    # the check's rows of generated data: the whole block drawn (CuPy cannot skip ahead)
    ctx = _context(library="cupy")
    info = {None: {"array-location": [(12, 24), (0, 30)], "chunk-location": (1, 0)}}
    drawn = fft_blocks.generated(info, n=30, seed=5, library="cupy").get()
    across = np.exp(1j * rng.uniform(0, 6, (30, 3)))
    again = fft_check_replay.row_terms(ctx, 1, [2, 7], across)
    assert all(isinstance(value, np.ndarray) for value in again.values())  # on the host
    np.testing.assert_allclose(again["products"], drawn[[2, 7]] @ across, rtol=1e-12)
    np.testing.assert_allclose(again["squares"], (np.abs(drawn[[2, 7]]) ** 2).sum(axis=1))
    np.testing.assert_allclose(again["bound"], np.abs(drawn[[2, 7]]) @ np.abs(across),
                               rtol=1e-12)


def test_the_checks_rows_skip_ahead_in_numpys_generator():
    """NumPy's rows are drawn by advancing to each: the same values as the block drawn whole."""
    ctx = _context(real=True, m=16)
    whole = fft_check_replay.input_rows(ctx, 1, np.arange(12))  # the block drawn whole
    rows = fft_check_replay.input_rows(ctx, 1, np.array([0, 5, 11]))
    np.testing.assert_allclose(rows, whole[[0, 5, 11]], rtol=0, atol=1e-15)


FAULTED = {"size": 100, "chunks": 10, "seed": 3}  # 10 row slabs, 10 column slabs
FAULTY_BLOCK = 3  # the one slab (a tenth) a fault touches


def _twiddle_off(transform):
    def faulty(block, block_info=None, **kwargs):
        out = transform(block, **kwargs)
        if block_info[0]["chunk-location"][0] == FAULTY_BLOCK:
            out = out.copy()
            out[:, 1::2] *= np.exp(1j * 0.002)  # every other frequency's twiddle 0.2 % off
        return out
    return faulty


def _column_slab_skipped(transform):
    def faulty(block, block_info=None, **kwargs):
        if block_info[0]["chunk-location"][0] == FAULTY_BLOCK:
            return block.astype(kwargs.get("value_type", "complex128"))
        return transform(block, **kwargs)
    return faulty


def _piece_not_transposed(cut):
    def faulty(block, c0=0, c1=1, library="numpy"):
        if c0 == 10 * FAULTY_BLOCK:  # every piece of one column slab
            return np.ascontiguousarray(block[:, c0:c1])
        return cut(block, c0, c1, library)
    return faulty


def _pieces_swapped(join):
    def faulty(pieces, library="numpy"):
        if len(pieces) > 2 and pieces[0].shape == pieces[1].shape and faulty.calls == 0:
            faulty.calls += 1  # one column slab joins two of its pieces in the wrong order
            pieces = [pieces[1], pieces[0], *pieces[2:]]
        return join(pieces, library)
    faulty.calls = 0
    return faulty


def _squares_off(summarise):
    def faulty(block, block_info=None, **kwargs):
        out = summarise(block, block_info, **kwargs)
        if block_info[0]["chunk-location"][0] == FAULTY_BLOCK:
            out[0, :block.shape[0]] *= 1.001  # a column block's energies 0.1 % off
        return out
    return faulty


def _input_block_off(draw):
    def faulty(block_info=None, **kwargs):
        out = draw(block_info, **kwargs)
        if block_info[None]["chunk-location"][0] == FAULTY_BLOCK:
            out = out * 1.001  # one row block of the input drawn 0.1 % too large
        return out
    return faulty


# What each fault replaces in pipelines.fft.tasks, and the wrapper that breaks it.
FAULTS = {
    "a wrong twiddle in a tenth of the row slabs": ("along_rows", _twiddle_off),
    "a wrong twiddle in a tenth of the column slabs": ("along_columns", _twiddle_off),
    "a column slab skipped": ("along_columns", _column_slab_skipped),
    "the transposed pieces of one column slab not transposed": ("piece",
                                                                _piece_not_transposed),
    "two pieces of the transpose swapped": ("joined", _pieces_swapped),
    "a column block's squares 0.1 % off": ("summary", _squares_off),
    "a tenth of the input drawn 0.1 % off": ("generated", _input_block_off),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_in_the_computation_fails_both_depths(in_process_client, monkeypatch, fault):
    """Faults injected into the tasks themselves (threads of this process run them)."""
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **FAULTED)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)
    name, breaking = FAULTS[fault]
    monkeypatch.setattr(fft_blocks, name, breaking(getattr(fft_blocks, name)))
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **FAULTED)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"


# One slab of the ten (a tenth of the input's rows, or of the spectrum's columns): a random one
# (a seeded draw, not the first) and the last; in the first stage (the row transforms) and in
# the last (the column transforms). Its twiddles are 0.2 % off at every other frequency: the
# magnitudes, and so Parseval's identity, unchanged.
ONE_SLAB = {"random": int(np.random.default_rng(12).integers(1, 9)), "last": 9}
STAGES = {"first (rows)": "along_rows", "last (columns)": "along_columns"}


def _named_slab(detail: str) -> set:
    """The slabs a failed detail names first: an input row's, a cell's column's, a block."""
    found = re.search(r"input row (\d+)|X\[\d+, (\d+)\]|column block (\d+)", detail)
    return {int(number) // (10 if i < 2 else 1) for i, number in enumerate(found.groups())
            if number is not None} if found else set()


@pytest.mark.parametrize("stage", sorted(STAGES))
@pytest.mark.parametrize("where", sorted(ONE_SLAB))
def test_a_fault_in_one_slab_of_either_stage_fails_both_depths(in_process_client, monkeypatch,
                                                               stage, where):
    slab, transform = ONE_SLAB[where], getattr(fft_blocks, STAGES[stage])

    def faulty(block, block_info=None, **kwargs):
        out = transform(block, **kwargs)
        if block_info[0]["chunk-location"][0] == slab:
            out = out.copy()
            out[:, 1::2] *= np.exp(1j * 0.002)
        return out

    monkeypatch.setattr(fft_blocks, STAGES[stage], faulty)
    spec, workload, raw = compute_as_runner(in_process_client, "fft-pipeline", **FAULTED)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, f"{depth} missed it: {check.detail}"
        if stage.startswith("first"):  # a row of the slab: its certified transform differs
            assert "its transform at sampled cell" in check.detail, (depth, check.detail)
            assert _named_slab(check.detail) == {slab}, (depth, check.detail)
        elif depth == "full" or "projection" not in check.detail:  # a cell, or the block
            assert _named_slab(check.detail) == {slab}, (depth, check.detail)
        else:  # fast's X s, summed over the blocks: an odd spectrum row, where the slab is off
            row = int(re.search(r"projection X s at spectrum row (\d+)", check.detail)[1])
            assert row % 2 == 1, (depth, check.detail)


@pytest.mark.gpu
@pytest.mark.parametrize("params", [{"size": 96, "chunks": 40, "seed": 9},
                                    {"size": 64, "chunks": 16, "seed": 2, "real": True},
                                    {"size": 48, "chunks": 13, "seed": 2, "inverse": True}])
def test_on_gpu_workers_both_depths_verify_and_catch_a_mutation(params):
    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        assert session.backend.is_gpu
        spec, workload, raw = compute_as_runner(session, "fft-pipeline", **params)
        assert isinstance(raw["lines"], np.ndarray)
        for depth in DEPTHS:
            check = verify_on(session, spec, workload, raw, depth)
            assert check.ok and check.depth == depth, check.detail
            moved = fft_check.MUTATIONS[0].alter(raw)
            assert not verify_on(session, spec, workload, moved, depth).ok
