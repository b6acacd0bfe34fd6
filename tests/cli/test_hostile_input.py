"""Hostile input: any option text, ``--gpus`` value or input file gives a value or one clear line.

In-process property tests (Hypothesis) walk every registered pipeline's parameters, the
``--gpus`` syntax against made-up inventories, and the cluster options that take text; a
handful of real ``python cli.py`` runs check that such input ends as one ``error:`` line, exit
code 2, before any cluster starts; and hostile input files (truncated, pickled objects, wrong
dtype, directories, corrupt tables, empty files) are refused without a traceback.
"""

from __future__ import annotations

import math
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import (
    FAKE_NVML_DIR,
    ROOT,
    TWO_GPUS,
    assert_one_error_line,
    fake_nvml_env,
)
from fault_injection import FAULTY_CLI, assert_no_cluster_started, fault_env, run_faulty_cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pipelines  # noqa: F401  (registers the built-in pipelines)
from daskgpu.clusters import devices, memory_sizes
from daskgpu.clusters import plan as cluster_plan
from daskgpu.data import array_input, table_input
from daskgpu.errors import (
    ClusterError,
    DaskGPUError,
    DeviceSelectionError,
    InputFileError,
    ParameterError,
)
from daskgpu.toolkit import chunking, registry

FAST = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

# ------------------------------------------------------------------------------ strategies

TOKENS = ["0", "1", "7", "-", ",", " ", "\t", "\n", "GPU-", "MIG-", "gpu-", "all", "auto",
          "nan", "NaN", "inf", "-inf", "1e400", "1e-400", "9" * 25, "9" * 5000, "_", "+", ".",
          "e", "0x10", "\u0661", "\u00b2", "\u2460", "\uff11", "\u00a0", "\u200b", "\x00",
          "\ud800", "float64", "FLOAT32", "normal", "true", ":", ": ", "'", '"', "*", "[",
          "/nonexistent/", ".npy", ".csv", ".zarr", ".parquet", "~", "..", "$HOME"]
HOSTILE_TEXT = st.one_of(
    st.text(),
    st.lists(st.sampled_from(TOKENS), max_size=6).map("".join),
    st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=3)), max_size=5).map(
        ",".join),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
)
# What a script may pass through the Python API instead of text.
PYTHON_VALUES = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.fractions(),
    st.lists(st.integers(min_value=-(2**70), max_value=2**70), max_size=3),
    st.tuples(st.floats(), st.floats()),
    st.tuples(st.integers(min_value=-(10**400), max_value=10**400), st.text(max_size=3)),
    st.just(b"10"),
    st.just(10**400),
    st.just(object()),
    st.just({"a": 1}),
    st.just(complex(1, 2)),
)

PARAMS = [(name, p.name) for name in registry.names() for p in registry.get(name).params]


def _param(pipeline: str, name: str):
    return registry.get(pipeline).param(name)


def _one_line(exc: BaseException) -> bool:
    text = str(exc)
    return bool(text.strip()) and "\n" not in text and "\r" not in text


def _converts_or_refuses(param, value):
    """``param.convert(value)``: a value that converts to itself again, or a ParameterError."""
    try:
        parsed = param.convert(value)
    except ParameterError as exc:
        assert _one_line(exc), repr(str(exc))
        assert param.option in str(exc)
        assert getattr(exc, "reason", ""), "the CLI shows the reason without the value"
        return None
    except InputFileError as exc:  # an input parameter that opens its file
        assert _one_line(exc) and str(exc).startswith(param.option), repr(str(exc))
        return None
    # A parsed value is itself a valid value meaning the same thing.
    assert param.convert(parsed) == parsed
    return parsed


# --------------------------------------------------------------------------- A1. parameters


def test_every_pipeline_parameter_is_covered():
    assert {name for name, _ in PARAMS} == set(registry.names())
    assert len(PARAMS) >= 20


@pytest.mark.parametrize(("pipeline", "name"), PARAMS)
@FAST
@given(text=HOSTILE_TEXT)
def test_any_text_parses_or_is_one_parameter_error(pipeline, name, text):
    param = _param(pipeline, name)
    _converts_or_refuses(param, text)
    if param.nargs > 1:  # the CLI hands over the words as a tuple
        _converts_or_refuses(param, tuple(text.split()))


@pytest.mark.parametrize(("pipeline", "name"), PARAMS)
@FAST
@given(value=PYTHON_VALUES)
def test_any_python_value_parses_or_is_one_parameter_error(pipeline, name, value):
    _converts_or_refuses(_param(pipeline, name), value)


@pytest.mark.parametrize("text", ["9" * 20, "9" * 5000, "1e400", "4611686018427387905",
                                  str(10**30)])
def test_huge_integers_are_refused_as_too_large(text):
    param = _param("mean-pipeline", "size")
    with pytest.raises(ParameterError, match="too large"):
        param.convert(text)
    assert param.convert("0" * 40 + "12") == 12  # leading zeros are not size


@pytest.mark.parametrize("value", [10**400, math.inf, "1e400", "nan"])
def test_huge_or_odd_float_is_a_parameter_error(value):
    with pytest.raises(ParameterError):  # was OverflowError for 10**400
        _param("stencil-pipeline", "alpha").convert(value)


def test_empty_chunks_tuple_is_refused():
    with pytest.raises(ParameterError, match="--chunks"):
        _param("mean-pipeline", "chunks").convert(())


def test_cli_shows_the_reason_even_when_the_value_holds_a_colon():
    from daskgpu.cli import options as cli_options

    spec = registry.get("mean-pipeline")
    ptype = cli_options.PipelineParamType(spec.param("size"))
    import click

    with pytest.raises(click.BadParameter) as err:
        ptype.convert("a: b", None, None)
    assert err.value.message == "must be an integer"


# ------------------------------------------------------------- A1. resolve and check hooks

EXTREME = st.sampled_from([1, 2, 3, 7, 2**31, 2**40, 2**62])
EXTREME_CHUNKS = st.one_of(
    st.just("auto"),
    EXTREME.map(str),
    st.tuples(EXTREME, EXTREME).map(lambda t: f"{t[0]},{t[1]}"),
    st.tuples(EXTREME, EXTREME, EXTREME).map(lambda t: ",".join(map(str, t))),
)
EXTREME_PARAMS = {
    "mean-pipeline": {"size": EXTREME, "chunks": EXTREME_CHUNKS, "dtype": st.just("float32")},
    "fft-pipeline": {"size": st.one_of(st.none(), EXTREME), "chunks": EXTREME_CHUNKS,
                     "real": st.sampled_from([None, True, "yes", "x"]),
                     "inverse": st.sampled_from([None, False, True])},
    "matmul-pipeline": {"size": st.one_of(st.none(), EXTREME),
                        "chunks": st.one_of(st.just("auto"), EXTREME.map(str),
                                            st.tuples(EXTREME, EXTREME).map(
                                                lambda t: f"{t[0]},{t[1]}")),
                        "shape": st.one_of(st.none(), st.tuples(EXTREME, EXTREME, EXTREME))},
    "histogram-pipeline": {"values": EXTREME, "chunks": EXTREME_CHUNKS,
                           "bins": st.sampled_from([1, 10_000_000]),
                           "range": st.sampled_from([None, (-1e308, 1e308), (0, 5e-324)])},
    "stencil-pipeline": {"size": st.one_of(st.none(), EXTREME), "chunks": EXTREME_CHUNKS,
                         "steps": st.sampled_from([0, 1, 4, 10**6, 2**62]),
                         "steps_per_exchange": EXTREME, "alpha": st.sampled_from([0, 0.25])},
    "trips-pipeline": {"rows": EXTREME, "seed": st.sampled_from([0, 2**62])},
    "join-pipeline": {"rows": st.sampled_from([1, 9, 10, 11, 10**10]),
                      "partitions": st.one_of(st.none(), EXTREME),
                      "match": st.sampled_from([0.0, 1.0]),
                      "broadcast": st.sampled_from(["auto", "true", "false", "TRUE", "yes"]),
                      "shuffle": st.sampled_from(["auto", "tasks", "p2p", "P2P", "disk", ""])},
    "train-pipeline": {"samples": EXTREME, "features": EXTREME, "chunks": EXTREME_CHUNKS,
                       "classes": st.sampled_from([2, 10, 2**31]),
                       "batch_size": st.sampled_from([None, 1, 7, 2**40])},
    "kmeans-pipeline": {"samples": EXTREME, "features": EXTREME, "chunks": EXTREME_CHUNKS,
                        "clusters": st.sampled_from([1, 16, 2**31]),
                        "k": st.sampled_from([1, 16, 2**31]),
                        "max_iter": st.sampled_from([1, 100, 2**40])},
    "pca-pipeline": {"samples": EXTREME, "features": EXTREME, "chunks": EXTREME_CHUNKS,
                     "components": st.sampled_from([1, 10, 2**31]),
                     "method": st.sampled_from(["exact", "randomized"])},
}


def test_extreme_strategies_cover_every_builtin_pipeline():
    builtin = {n for n in registry.names()
               if registry.get(n).prepare.__module__.startswith("pipelines.")}
    assert len(builtin) >= 5 and set(EXTREME_PARAMS) >= builtin


@pytest.mark.parametrize("pipeline", sorted(EXTREME_PARAMS))
@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_resolve_with_extreme_values_is_ok_or_a_daskgpu_error(pipeline, data):
    spec = registry.get(pipeline)
    given_params = {k: data.draw(s, label=k) for k, s in EXTREME_PARAMS[pipeline].items()}
    given_params = {k: v for k, v in given_params.items() if v is not None}
    try:
        resolved = spec.resolve(**given_params)
    except DaskGPUError as exc:
        assert _one_line(exc)
        return
    # What resolve lets through is a graph a client can build: a bounded number of blocks.
    size, chunks = resolved.get("size", resolved.get("values")), resolved.get("chunks")
    if size is not None and chunks is not None:
        shape = (size,) if pipeline == "histogram-pipeline" else (size, size)
        itemsize = np.dtype(resolved.get("dtype", "float64")).itemsize
        assert chunking.block_count(chunks, shape, itemsize) <= chunking.MAX_BLOCKS


@pytest.mark.parametrize(
    ("pipeline", "params", "message"),
    [
        ("mean-pipeline", {"size": 10**6, "chunks": 1}, "blocks"),  # hung building the graph
        ("mean-pipeline", {"size": 2**40}, "smaller size"),  # MemoryError in the client
        ("histogram-pipeline", {"values": 2**40, "chunks": 2**62}, "memory"),  # 8 TiB block
        ("stencil-pipeline", {"size": 3, "steps_per_exchange": 4}, "deeper"),  # after start
        ("stencil-pipeline", {"steps": 2**62}, "exchanges"),  # hung building the graph
        ("stencil-pipeline", {"steps": 10**6, "steps_per_exchange": 1}, "exchanges"),
        ("trips-pipeline", {"rows": 2**62}, "at most"),  # hung: 2e12 partitions
        ("join-pipeline", {"rows": 10**10, "partitions": 10**10}, "at most"),  # hung
    ],
)
def test_layouts_no_cluster_can_run_are_refused_up_front(pipeline, params, message):
    started = time.perf_counter()
    with pytest.raises(ParameterError, match=message):
        registry.get(pipeline).resolve(**params)
    assert time.perf_counter() - started < 5


def test_ordinary_layouts_still_resolve():
    assert registry.get("mean-pipeline").resolve(size=1, chunks="5,5")["chunks"] == (5, 5)
    assert registry.get("stencil-pipeline").resolve(size=8000, steps=200)["steps"] == 200
    assert registry.get("histogram-pipeline").resolve(values=10**9, chunks=10**6)["values"] == 10**9


# -------------------------------------------------------------------------- A1. --gpus

UUID0, UUID1 = (g["uuid"] for g in TWO_GPUS["gpus"])
MIG_A = "MIG-1111aaaa-0000-1111-2222-333344445555"
MIG_B = "MIG-1111bbbb-0000-1111-2222-333344445555"
MIG_GPUS = {"gpus": [TWO_GPUS["gpus"][0], {**TWO_GPUS["gpus"][1], "migs": [
    {"uuid": MIG_A, "memory_total": 20 * 2**30}, {"uuid": MIG_B, "memory_total": 40 * 2**30}]}]}
FOUR_GPUS = {"gpus": [
    {"name": f"GPU {i}", "uuid": f"GPU-{i}{i}{i}{i}0000-0000-0000-0000-00000000000{i}"}
    for i in range(4)
]}


def _inventory(spec):
    import json

    saved = sys.modules.pop("pynvml", None)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DASKGPU_TEST_NVML", json.dumps(spec))
            mp.syspath_prepend(str(FAKE_NVML_DIR))
            return devices.inventory()
    finally:  # leave no fake pynvml behind
        sys.modules.pop("pynvml", None)
        if saved is not None:
            sys.modules["pynvml"] = saved


@pytest.fixture(scope="module")
def inventories():
    invs = {"two": _inventory(TWO_GPUS), "mig": _inventory(MIG_GPUS),
            "four": _inventory(FOUR_GPUS)}
    assert [len(i.all_devices()) for i in invs.values()] == [2, 4, 4]
    return invs


ITEM = st.one_of(
    st.integers(0, 5).map(str),
    st.tuples(st.integers(0, 5), st.integers(0, 5)).map(lambda t: f"{t[0]}-{t[1]}"),
    st.sampled_from([UUID0, UUID1, MIG_A, MIG_B, UUID0[:8], MIG_A[:8], UUID0.lower(),
                     "GPU-", "MIG-", "GPU-zz", "all", "ALL", "-1", "1-", "-", " 0 ", "0x1"]),
    st.sampled_from(["\u0661", "\u00b2", "\uff10", "0\x00", "\u00a0"]),
    st.text(max_size=4),
)
SELECTION = st.one_of(
    st.text(),
    st.lists(ITEM, min_size=1, max_size=5).map(",".join),
    st.lists(ITEM, min_size=1, max_size=3).map(lambda items: " , ".join(items) + " "),
    st.integers(0, 10**30).map(str),
)
CUDA_VISIBLE = st.one_of(
    st.none(),
    st.just(""),
    st.lists(st.sampled_from(["0", "1", "2", "3", "9", UUID0, UUID1, MIG_A, MIG_B, "GPU-",
                              "MIG-1111", "x", "-1", " 1"]), max_size=4).map(",".join),
    st.text(max_size=8),
)


def _expected(text: str, visible: list) -> list | None:
    """What a plain selection of indices and ranges means: positions in ``visible``."""
    if text.strip().lower() == "all":
        return list(visible)
    out = []
    for raw in text.split(","):
        item = raw.strip()
        match = re.fullmatch(r"([0-9])(?:-([0-9]))?", item)
        if match is None:
            return None  # not a plain item: no model
        first, last = int(match[1]), int(match[2] or match[1])
        if first > last:
            return []  # a range that runs backwards is an error
        out.extend(range(first, last + 1))
    if len(set(out)) != len(out) or any(i >= len(visible) for i in out) or not out:
        return []  # must be an error
    return [visible[i] for i in out]


@pytest.mark.parametrize("which", ["two", "mig", "four"])
@FAST
@given(text=SELECTION, cuda_visible=CUDA_VISIBLE)
@example(text="0-3", cuda_visible="3,2,1,0")
@example(text="1,0", cuda_visible=None)
@example(text=MIG_B + "," + MIG_A, cuda_visible=None)
@example(text="all", cuda_visible="1,1")
def test_gpus_selects_existing_devices_in_order_or_refuses(inventories, which, text,
                                                            cuda_visible):
    inv = inventories[which]
    try:
        chosen = devices.select(text, inv, cuda_visible=cuda_visible, use_environment=False)
    except DeviceSelectionError as exc:
        assert _one_line(exc) and str(exc).startswith("--gpus")
        assert _expected(text, devices.visible_devices(inv, cuda_visible)) in (None, [])
        return
    assert chosen and len(set(chosen)) == len(chosen)
    assert all(d in inv.all_devices() for d in chosen)
    visible = devices.visible_devices(inv, cuda_visible)
    allowed = visible + [m for v in visible for m in v.migs]
    assert all(d in allowed for d in chosen), "a device outside CUDA_VISIBLE_DEVICES"
    expected = _expected(text, visible)
    if expected is not None:
        assert chosen == expected  # the order given, positions counted in the visible list


@FAST
@given(text=st.one_of(st.text(), SELECTION))
def test_parse_selection_never_crashes(text):
    try:
        items = devices.parse_selection(text)
    except DeviceSelectionError as exc:
        assert _one_line(exc)
        return
    assert items
    for item in items:
        assert item == "all" or isinstance(item, (int, str, tuple))
        if isinstance(item, int):
            assert 0 <= item < 10**6
        if isinstance(item, tuple):
            assert 0 <= item[0] <= item[1] < 10**6


# ----------------------------------------------------------------- A1. cluster options

MEMORY = st.one_of(st.text(), st.lists(st.sampled_from(
    ["0", "1", "8", ".", "e", "5", "GB", "GiB", "MB", "k", "nan", "inf", "-", " ", "1e400",
     "9" * 30, "%", "auto"]), max_size=5).map("".join))


@FAST
@given(text=MEMORY)
@example(text="1e300GB")
def test_memory_size_is_a_value_or_a_cluster_error(text):
    try:
        memory_sizes.parse(text)
    except ClusterError as exc:
        assert _one_line(exc)


@FAST
@given(workers=st.one_of(st.none(), st.integers(-3, 3), st.booleans()),
       threads=st.one_of(st.none(), st.integers(-3, 3)))
def test_worker_counts_are_checked(workers, threads):
    try:
        plan = cluster_plan.plan(cpu=True, workers=workers, threads_per_worker=threads,
                             dashboard=False)
    except ClusterError as exc:
        assert _one_line(exc)
        return
    assert plan.n_workers >= 1 and plan.threads_per_worker >= 1


@pytest.mark.parametrize("text", ["nan", "-5", "inf", "1e400", "1.5", "1e300GB", "-2GB", "x"])
def test_memory_size_refuses_meaningless_sizes(text):
    with pytest.raises(ClusterError):
        memory_sizes.parse(text)


# --------------------------------------------------------- A2. the command line, for real


def _env(gpus: bool = False) -> dict:
    env = fake_nvml_env(TWO_GPUS if gpus else {"error": "LibraryNotFound"})
    env["DASK_DISTRIBUTED__DIAGNOSTICS__NVML"] = "False"
    return env


CLI_CASES = [
    ("mean-pipeline", ["--size", "1e400"], False, "--size"),
    ("mean-pipeline", ["--size", "9" * 5000], False, "too large"),
    ("mean-pipeline", ["--size", "1000000", "--chunks", "1"], False, "blocks"),
    ("mean-pipeline", ["--chunks", "a: b"], False, "--chunks"),
    ("mean-pipeline", ["--seed", "\u00b2"], False, "--seed"),
    ("histogram-pipeline", ["--range", "nan", "1"], False, "--range"),
    ("histogram-pipeline", ["--bins", "\u0661\u0660" * 5], False, "--bins"),
    ("stencil-pipeline", ["--size", "3", "--steps-per-exchange", "4"], False, "deeper"),
    ("stencil-pipeline", ["--alpha", "1e-400x"], False, "--alpha"),
    ("join-pipeline", ["--partitions", "10000000000"], False, "--partitions"),
    ("fft-pipeline", ["--size", str(2**40)], False, "PiB"),
    ("fft-pipeline", ["--size", "100000", "--chunks", "10"], False, "slabs"),
    ("fft-pipeline", ["--inverse", "--real"], False, "irfft2"),
    ("fft-pipeline", ["--input", "/nonexistent/x.npy"], False, "no such file"),
    ("matmul-pipeline", ["--shape", "1,2"], False, "three sizes"),
    ("matmul-pipeline", ["--shape", f"{2**40},{2**40},{2**40}"], False, "smaller size"),
    ("matmul-pipeline", ["--input-a", "/nonexistent/a.npy", "--input-b", "/nonexistent/b.npy"],
     False, "no such file"),
    ("train-pipeline", ["--labels", "/nonexistent/y.npy"], False, "--labels without --input"),
    ("train-pipeline", ["--input", "/nonexistent/x.npy", "--labels", "/nonexistent/y.npy"],
     False, "no such file"),
    ("kmeans-pipeline", ["--input", "/nonexistent/x.npy"], False, "no such file"),
    ("join-pipeline", ["--broadcast", "true", "--shuffle", "tasks"], False, "--shuffle tasks"),
    ("pca-pipeline", ["--features", "8", "--components", "9"], False, "at most 8"),
    ("pca-pipeline", ["--samples", str(2**62), "--features", "4096"], False, "smaller size"),
    ("pca-pipeline", ["--samples", "abc"], False, "--samples"),
    ("mean-pipeline", ["--gpus", "0,\u0661-\u0660"], True, "--gpus"),
    ("mean-pipeline", ["--gpus", "GPU-,0"], True, "--gpus"),
    ("mean-pipeline", ["--gpus", "0\n1"], True, "--gpus"),
]


@pytest.fixture
def cluster_log(tmp_path_factory):
    """Where tests/faulty_cli.py records each cluster a run starts (``watch_clusters``)."""
    return tmp_path_factory.mktemp("clusters") / "started"


def test_the_cluster_watch_sees_a_run_start_its_cluster(cluster_log):
    proc = run_faulty_cli("run", "mean-pipeline", "--size", "100", "--workers", "1",
                          "--no-dashboard", "-q", env=_env(), timeout=60,
                          watch_clusters=str(cluster_log))
    assert proc.returncode == 0, proc.stderr
    assert cluster_log.read_text().split() == ["LocalCluster", "Client"]


@pytest.mark.parametrize(("pipeline", "args", "gpus", "fragment"), CLI_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CLI_CASES)])
def test_cli_hostile_option_is_one_error_line(cluster_log, pipeline, args, gpus, fragment):
    proc = run_faulty_cli("run", pipeline, *args, "--workers", "1", env=_env(gpus), timeout=60,
                          watch_clusters=str(cluster_log))
    assert_no_cluster_started(cluster_log)
    assert_one_error_line(proc, None, fragment)


def test_cli_undecodable_path_is_one_error_line(cluster_log):
    # A path that is not UTF-8 reaches Python as surrogates; the error line must still print.
    proc = subprocess.run(
        [sys.executable, str(FAULTY_CLI), "run", "trips-pipeline", "--input",
         b"/nonexistent-\xff.csv", "--workers", "1"],
        capture_output=True, env=fault_env(_env(), watch_clusters=str(cluster_log)),
        timeout=60, cwd=ROOT,
    )
    proc.stdout = proc.stdout.decode()
    proc.stderr = proc.stderr.decode("utf-8", "replace")
    assert_no_cluster_started(cluster_log)
    assert_one_error_line(proc, None, "no such file")


# ------------------------------------------------------------------- B. hostile input files


class _Payload:
    """Unpickling this creates the file ``path``: proof that something unpickled."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    files = {}
    whole = base / "whole.npy"
    np.save(whole, np.linspace(0, 1, 4096))
    data = whole.read_bytes()
    (base / "truncated.npy").write_bytes(data[: len(data) - 1000])
    files["truncated"] = base / "truncated.npy"
    # An object array whose pickle would create a marker file when loaded.
    marker = base / "PICKLE-RAN"
    objects = base / "objects.npy"
    np.save(objects, np.array([_Payload(str(marker)), 1.5], dtype=object), allow_pickle=True)
    files["objects"], files["marker"] = objects, marker
    import zarr

    complex_z = base / "complex.zarr"
    zarr.save_array(str(complex_z), np.ones(16, dtype=np.complex128))
    files["complex"] = complex_z
    ints_z = base / "ints.zarr"
    zarr.save_array(str(ints_z), np.arange(16, dtype=np.int64))
    files["ints"] = ints_z
    strings_z = base / "strings.zarr"
    z = zarr.create_array(str(strings_z), shape=(3,), dtype=str)
    z[:] = ["a", "b", "c"]
    files["strings"] = strings_z
    folder = base / "folder"
    folder.mkdir()
    np.save(folder / "inside.npy", np.ones(3))
    files["folder"] = folder
    (base / "empty.npy").write_bytes(b"")
    files["empty-npy"] = base / "empty.npy"
    (base / "empty.csv").write_bytes(b"")
    files["empty-csv"] = base / "empty.csv"
    (base / "corrupt.parquet").write_bytes(b"PAR1" + os.urandom(64) + b"PAR1")
    files["corrupt-parquet"] = base / "corrupt.parquet"
    (base / "corrupt.csv").write_bytes(b"pickup_time,fare\n\"2026-01-01,1\n" + bytes(range(256)))
    files["corrupt-csv"] = base / "corrupt.csv"
    return {k: str(v) for k, v in files.items()}


def test_the_pickle_payload_would_run_if_loaded(hostile_files, tmp_path):
    # The test's own check: loading the object file with pickling allowed runs the payload.
    copy = tmp_path / "copy.npy"
    marker = tmp_path / "PICKLE-RAN"
    np.save(copy, np.array([_Payload(str(marker))], dtype=object), allow_pickle=True)
    np.load(copy, allow_pickle=True)
    assert marker.exists()


def test_no_code_enables_unpickling():
    sources = [ROOT / "cli.py", *(ROOT / "daskgpu").rglob("*.py"), *(ROOT / "pipelines").glob(
        "*.py")]
    offenders = [str(p) for p in sources if re.search(r"allow_pickle\s*=\s*True|pickle\.loads?\(",
                                                      pathlib.Path(p).read_text())]
    assert offenders == []


def test_object_npy_is_refused_without_unpickling(hostile_files):
    with pytest.raises(InputFileError, match="Python objects"):
        array_input.open_array(hostile_files["objects"])
    assert not os.path.exists(hostile_files["marker"])


def test_negative_shape_in_a_crafted_header_is_refused(tmp_path):
    path = tmp_path / "negative.npy"
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": (-2, 3)})
        f.write(b"\0" * 48)
    with pytest.raises(InputFileError, match="negative"):
        array_input.open_array(str(path))


def test_a_directory_of_parquet_files_is_a_valid_trips_input(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"pickup_time": pd.date_range("2026-01-01", periods=4, freq="h"),
                          **{c: [40.6, 40.7, 40.8, 40.7] for c in ("pickup_lat", "dropoff_lat")},
                          **{c: [-74.0] * 4 for c in ("pickup_lon", "dropoff_lon")},
                          "passengers": [1, 2, 3, 4], "fare": [5.0, 6.0, 7.0, 8.0]})
    folder = tmp_path / "trips"
    folder.mkdir()
    frame.iloc[:2].to_parquet(folder / "a.parquet")
    frame.iloc[2:].to_parquet(folder / "b.parquet")
    (folder / "nested.parquet").mkdir()  # a directory named like a file is not read as one
    from pipelines.trips import pipeline as trips_pipeline

    source = table_input.open_table(str(folder), trips_pipeline.COLUMNS)
    assert source.kind == "parquet" and source.rows == 4 and len(source.files) == 2


def test_csv_column_of_text_gives_no_warning(tmp_path, recwarn):
    path = tmp_path / "t.csv"
    path.write_text("pickup_time,fare\nhello,1\nworld,2\n")
    with pytest.raises(InputFileError, match="pickup_time is"):
        table_input.open_table(str(path), {"pickup_time": "datetime"})
    assert [str(w.message) for w in recwarn] == []  # a warning would be a second stderr line


FILE_CASES = [
    # (pipeline, file, fragments of the error line)
    ("mean-pipeline", "truncated", ["truncated", "header promises"]),
    ("histogram-pipeline", "objects", ["Python objects", "never unpickles"]),
    ("histogram-pipeline", "complex", ["complex128", "float32 or float64"]),
    ("histogram-pipeline", "ints", ["int64", "float32 or float64", "astype"]),
    ("mean-pipeline", "strings", ["Python objects|<U|str|numeric"]),
    ("mean-pipeline", "folder", ["is a directory", "Zarr"]),
    ("mean-pipeline", "empty-npy", ["not a valid .npy"]),
    ("trips-pipeline", "corrupt-parquet", ["not a readable Parquet"]),
    ("trips-pipeline", "corrupt-csv", ["corrupt.csv"]),
    ("trips-pipeline", "empty-csv", ["not a readable CSV"]),
    ("pca-pipeline", "ints", ["int64", "float32 or float64", "astype"]),
    ("pca-pipeline", "objects", ["Python objects", "never unpickles"]),
]


@pytest.mark.parametrize(("pipeline", "key", "fragments"), FILE_CASES,
                         ids=[f"{p}-{k}" for p, k, _ in FILE_CASES])
def test_cli_hostile_input_file_is_one_error_line(hostile_files, tmp_path, cluster_log, pipeline,
                                                  key, fragments):
    path = hostile_files[key]
    before = sorted(os.listdir(os.path.dirname(path)))
    out = tmp_path / ("out.csv" if pipeline != "mean-pipeline" else "unused")
    extra = ["--output", str(out)] if pipeline != "mean-pipeline" else []
    proc = run_faulty_cli("run", pipeline, "--input", path, *extra, "--workers", "1",
                          env=_env(), timeout=60, watch_clusters=str(cluster_log))
    assert_no_cluster_started(cluster_log)
    line = assert_one_error_line(proc, None, path)
    for fragment in fragments:
        assert re.search(fragment if "|" in fragment else re.escape(fragment), line), line
    assert sorted(os.listdir(os.path.dirname(path))) == before  # nothing written beside it
    assert os.listdir(tmp_path) == []  # no output, no temporary
    assert not os.path.exists(hostile_files["marker"])
