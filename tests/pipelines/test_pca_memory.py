"""pca-pipeline on arrays in hand: NumPy and Dask arrays as ``input=``, verified as files are."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

import daskgpu
from daskgpu.errors import InputFileError, ParameterError
from daskgpu.testing import check_pipeline
from pipelines.pca import tasks as pca_blocks

DEPTHS = ("fast", "full")
ROWS, FEATURES, BLOCKS = 100, 12, 10  # blocks of 100 rows, one cell each: fast sees every cell
# A seeded block, neither the first nor the last, and the last block.
FAULTY = {"random": int(np.random.default_rng(2027).integers(1, BLOCKS - 1)), "last": BLOCKS - 1}
# The run's own per-block functions, by method; all of them for the randomised passes.
PER_BLOCK = {"covariance": ("gram_summary",), "exact": ("block_summary",),
             "randomized": ("power_summary", "projected_r_summary")}


def _values(seed: int = 11) -> np.ndarray:
    """Rows of a known spectrum, off-centre: what a PCA of blocks must centre."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.2, FEATURES)
    return rng.standard_normal((ROWS * BLOCKS, FEATURES)) * scales + 4.0


def _given(values: np.ndarray, kind: str):
    """``values`` as a NumPy array, or a Dask array in blocks that are not the pipeline's."""
    return values if kind == "numpy" else da.from_array(values, chunks=(250, 6))


def _label(kind: str) -> str:
    """How a run names the input ``_given`` makes."""
    name = "numpy.ndarray" if kind == "numpy" else "dask.array.Array"
    return f"{name} float64 ({ROWS * BLOCKS}, {FEATURES})"


def _rows_off(original, values: np.ndarray, block: int):
    """``original`` (a per-block task) with block ``block``'s rows 0.1 % off, the others as
    they are; the block is known by its values, as the task receives it."""
    faulty = values[block * ROWS:(block + 1) * ROWS]

    def task(rows, *args, **kwargs):
        if rows.shape == faulty.shape and np.array_equal(rows, faulty):
            rows = rows * 1.001  # a fresh array: the input's own memory stays as it was
        return original(rows, *args, **kwargs)

    return task


@pytest.mark.parametrize(("kind", "where", "method"), [
    ("numpy", "random", "covariance"), ("dask", "last", "covariance"),
    ("numpy", "last", "exact"), ("dask", "random", "randomized"),
])
def test_one_block_of_an_array_in_memory_off_fails_both_depths(in_process_client, monkeypatch,
                                                               kind, where, method):
    """One block's rows 0.1 % off in the run's own task (a seeded block, the last): the check
    reads the block again from the object (the NumPy array, or the user's Dask graph) and both
    depths fail naming it; the unfaulted run verifies; the input is left as it was."""
    values = _values()
    kept = values.copy()
    block = FAULTY[where]
    params = {"input": _given(values, kind), "chunks": ROWS, "components": 3, "method": method,
              "power_iters": 1}
    with monkeypatch.context() as patched:
        for name in PER_BLOCK[method]:
            patched.setattr(pca_blocks, name,
                            _rows_off(getattr(pca_blocks, name), values, block))
        spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline", **params)
    assert workload.description["format"] == "memory"
    assert workload.description["blocks"] == BLOCKS
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert not check.ok, (depth, check.detail)
        if depth == "fast" and method != "randomized":
            assert f"of block {block}:" in check.detail, check.detail
    spec, workload, raw = compute_as_runner(in_process_client, "pca-pipeline", **params)
    for depth in DEPTHS:
        check = verify_on(in_process_client, spec, workload, raw, depth)
        assert check.ok, (depth, check.detail)
    np.testing.assert_array_equal(values, kept)


@pytest.mark.parametrize(("kind", "method"), [("numpy", "auto"), ("dask", "exact")])
def test_the_declared_mutations_are_caught_on_an_array_in_memory(cpu_client, kind, method):
    report = check_pipeline("pca-pipeline", session=cpu_client, input=_given(_values(), kind),
                            chunks=ROWS, components=3, method=method)
    assert report.depths == DEPTHS
    names = {caught.mutation for caught in report.caught}
    assert len(names) == len(daskgpu.get_pipeline("pca-pipeline").mutations) >= 6
    assert report.params["input"] == _label(kind)


def test_an_array_in_memory_gives_the_files_answer_and_is_named_not_held(cpu_client, tmp_path):
    """The same rows as a .npy file, a NumPy array and a Dask array of other blocks (rechunked,
    and said so): the same fit, every array in the run's data."""
    values = _values(3)
    path = tmp_path / "x.npy"
    np.save(path, values)
    runs = {kind: daskgpu.run("pca-pipeline", cpu_client, input=given, chunks=ROWS,
                              components=4)
            for kind, given in (("file", str(path)), ("numpy", values),
                                ("dask", _given(values, "dask")))}
    expected = runs["file"]
    assert expected.verified, expected.verification
    for kind in ("numpy", "dask"):
        run = runs[kind]
        assert run.verified, run.verification
        assert run.params["input"] == run.data["source"] == _label(kind)
        assert run.data["format"] == "memory"
        for key in ("explained_variance", "explained_variance_ratio", "singular_values",
                    "components", "mean"):
            np.testing.assert_allclose(np.asarray(run.data[key]), np.asarray(expected.data[key]),
                                       rtol=1e-12, atol=1e-14, err_msg=f"{kind} {key}")
        assert run.value["total_variance"] == pytest.approx(expected.value["total_variance"],
                                                            rel=1e-12)
    assert "rechunked" not in runs["numpy"].data
    assert runs["dask"].data["rechunked"] == (
        "rechunked from blocks of (250, 6) to (100, 12), the pipeline's")
    centred = values - values.mean(axis=0)
    lam = np.linalg.eigvalsh(centred.T @ centred)[::-1][:4] / (len(values) - 1)
    np.testing.assert_allclose(runs["numpy"].data["explained_variance"], lam, rtol=1e-10)
    np.testing.assert_allclose(runs["numpy"].data["mean"], values.mean(axis=0), rtol=1e-12)


# Where the blocks of a Dask input were made (a task pickles a module's function by name: the
# workers, threads of this process, append to this very list).
MADE: list[str] = []


def _on_a_worker(block):
    from distributed import get_worker

    MADE.append(get_worker().address)  # ValueError outside a worker's task
    return block


def test_a_dask_input_is_computed_on_the_workers_only(in_process_client):
    """Every block of the user's graph, for the run and for both checks, is made inside a
    worker's task (workers are threads here: a block made in the client would raise); the run
    makes each of them once, and a check reads them again."""
    given = _given(_values(5), "dask").map_blocks(_on_a_worker, dtype=np.float64)
    blocks = given.npartitions  # 4 x 2
    made = {}
    for depth in ("off", *DEPTHS):
        MADE.clear()
        result = daskgpu.run("pca-pipeline", in_process_client, input=given, chunks=ROWS,
                             components=2, verify=depth)
        assert result.verified is not False, result.verification
        made[depth] = list(MADE)
    assert len(made["off"]) == blocks
    assert all(len(made[depth]) > blocks for depth in DEPTHS), {d: len(m) for d, m in made.items()}
    assert len(set(made["full"])) == 2  # both workers


@pytest.mark.parametrize(("given", "params", "error", "message"), [
    (np.ones(30), {}, InputFileError, r"numpy.ndarray float64 \(30,\): .*2 axes"),
    (np.ones((30, 3), dtype=np.int64), {}, InputFileError, "float32 or float64"),
    (np.ones((30, 3)), {"components": 4}, ParameterError, "at most 3"),
    (np.ones((30, 3)), {"seed": 3}, ParameterError, "seeds only --method randomized"),
    (da.ones((30, 3), chunks=10)[da.ones(30, chunks=10) > 0], {}, InputFileError,
     "compute_chunk_sizes"),
])
def test_a_bad_array_is_refused_in_one_line(given, params, error, message):
    with pytest.raises(error, match=message) as caught:
        daskgpu.get_pipeline("pca-pipeline").resolve(input=given, **params)
    assert "\n" not in str(caught.value)


def test_a_seed_with_an_array_starts_the_randomised_method(cpu_client):
    values = _values(9)
    runs = [daskgpu.run("pca-pipeline", cpu_client, input=values, chunks=ROWS, components=2,
                        method="randomized", power_iters=1, seed=seed) for seed in (1, 2)]
    assert all(run.verified for run in runs)
    assert [run.params["seed"] for run in runs] == [1, 2]
    # the same components from another start, to rounding: not the same bits
    np.testing.assert_allclose(runs[0].data["components"], runs[1].data["components"], atol=1e-9)
    assert not np.array_equal(runs[0].data["components"], runs[1].data["components"])
