"""Verification that can fail: every built-in pipeline's declared mutations are caught.

Each pipeline is run small on a real CPU cluster by ``daskgpu.testing.check_pipeline``, the
plugin authors' own test: its computed result must verify; then every alteration the pipeline
declares (``Pipeline.mutations``: a reversed histogram, a doubled sum, a dropped block, ...) is
applied to a copy of that result before ``verify``, which must then fail with a detail naming
what disagreed, at both depths. A new pipeline cannot skip this: the registry walk below
requires mutations and a small case for every built-in pipeline.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from daskgpu.testing import check_pipeline
from daskgpu.toolkit import registry

# Small runs of each built-in pipeline (fast on two CPU workers, several blocks/partitions).
CASES = {
    "mean-pipeline": {"size": 600, "chunks": 200, "seed": 3},
    "matmul-pipeline": {"shape": "150,120,130", "chunks": "60,40,50", "seed": 8},
    "fft-pipeline": {"size": 96, "chunks": 40, "seed": 9},
    "histogram-pipeline": {"values": 40_000, "chunks": 5_000, "bins": 16, "seed": 4},
    "stencil-pipeline": {"size": 60, "chunks": 20, "steps": 12},
    "trips-pipeline": {"rows": 20_000, "partitions": 4, "seed": 5},
    "join-pipeline": {"rows": 20_000, "partitions": 4, "seed": 6},
    "train-pipeline": {"samples": 4_000, "features": 32, "classes": 5, "steps": 4,
                       "chunks": 1_000, "seed": 7},
    "kmeans-pipeline": {"samples": 8_000, "features": 4, "clusters": 5, "chunks": 2_000,
                        "init": "k-means||", "seed": 7},
    "pca-pipeline": {"samples": 3_000, "features": 16, "components": 4, "chunks": 700,
                     "seed": 9},
}
MIN_MUTATIONS = 3


def _builtin() -> list[str]:
    return [n for n in registry.names()
            if registry.get(n).prepare.__module__.startswith("pipelines.")]


def test_every_builtin_pipeline_declares_mutations_and_a_case():
    names = _builtin()
    assert len(names) >= 5
    assert set(CASES) >= set(names), f"add a small case for {sorted(set(names) - set(CASES))}"
    for name in names:
        mutations = registry.get(name).mutations
        assert len(mutations) >= MIN_MUTATIONS, f"{name} declares {len(mutations)} mutations"
        assert len({m.name for m in mutations}) == len(mutations), name
        for mutation in mutations:  # a phrase naming a quantity, not a word any failure has
            assert re.compile(mutation.names) and len(mutation.names.split()) >= 3, (
                name, mutation.names)


DEPTHS = ("fast", "full")


def _check(session, name: str, skip: tuple[str, ...] = (), **params):
    """``check_pipeline`` on the shared ``session``; every mutation not skipped was caught."""
    report = check_pipeline(name, session=session, skip_mutations=skip, **params)
    assert report.depths == DEPTHS, str(report)
    applied = {m.name for m in registry.get(name).mutations} - set(skip)
    for depth in DEPTHS:
        assert {c.mutation for c in report.caught if c.depth == depth} == applied, str(report)
    return report


def _with_written_labels(name: str, params: dict, folder, suffix: str) -> dict:
    """kmeans-pipeline's params with ``--labels`` (some of its mutations alter those labels)."""
    if name != "kmeans-pipeline":
        return params
    return {**params, "labels": str(folder / f"labels{suffix}")}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_result_verifies_and_every_mutation_is_caught_at_both_depths(cpu_client, name,
                                                                        tmp_path):
    """The unaltered result verifies; each mutation, on a copy, fails naming what disagreed."""
    _check(cpu_client, name, **_with_written_labels(name, CASES[name], tmp_path, ".npy"))


# ------------------------------------------------------------------ the same on an input

# Mutations of what a run on an input does not report (there is no teacher model to compare).
NOT_REPORTED_FOR_INPUTS = {("train-pipeline", "teacher's best accuracy altered")}


def _input_cases(folder) -> dict:
    """Small runs on input files (written to ``folder``): the check re-reads them its own way."""
    rng = np.random.default_rng(1)
    arrays = {
        "m.npy": rng.random((600, 600)),
        "h.npy": rng.standard_normal(40_000),
        "a.npy": rng.standard_normal((150, 120)),
        "b.npy": rng.standard_normal((120, 130)),
        "p.npy": rng.standard_normal((3_000, 16)) @ np.diag(np.linspace(3, 0.1, 16)),
        "k.npy": (rng.uniform(-10, 10, (5, 4))[rng.integers(0, 5, 8_000)]
                  + rng.standard_normal((8_000, 4))).astype(np.float32),
        "tx.npy": rng.standard_normal((4_000, 32)).astype(np.float32),
        "f.npy": rng.standard_normal((48, 48)) + 1j * rng.standard_normal((48, 48)),
    }
    arrays["ty.npy"] = np.argmax(arrays["tx.npy"] @ rng.standard_normal((32, 5)), axis=1)
    for name, array in arrays.items():
        np.save(folder / name, array)
    path = {name: str(folder / name) for name in arrays}
    return {
        "mean-pipeline": {"input": path["m.npy"], "chunks": 200},
        "histogram-pipeline": {"input": path["h.npy"], "chunks": 5_000, "bins": 16},
        "matmul-pipeline": {"input_a": path["a.npy"], "input_b": path["b.npy"],
                            "chunks": "60,40,50"},
        "pca-pipeline": {"input": path["p.npy"], "chunks": 700, "components": 4},
        "kmeans-pipeline": {"input": path["k.npy"], "chunks": 2_000, "k": 5, "seed": 3},
        "train-pipeline": {"input": path["tx.npy"], "labels": path["ty.npy"], "chunks": 1_000,
                           "steps": 4, "classes": 5, "seed": 3},
        "fft-pipeline": {"input": path["f.npy"], "chunks": 20},
    }


INPUT_PIPELINES = ("mean-pipeline", "histogram-pipeline", "matmul-pipeline", "pca-pipeline",
                   "kmeans-pipeline", "train-pipeline", "fft-pipeline")


@pytest.fixture(scope="module")
def input_cases(tmp_path_factory):
    return _input_cases(tmp_path_factory.mktemp("inputs"))


@pytest.mark.parametrize("name", INPUT_PIPELINES)
def test_on_an_input_every_reported_alteration_fails(cpu_client, input_cases, name, tmp_path):
    """The checks of an input's run differ (re-read, no seeds): each mutation still fails it."""
    skip = tuple(m for n, m in NOT_REPORTED_FOR_INPUTS if n == name)
    _check(cpu_client, name, skip,
           **_with_written_labels(name, input_cases[name], tmp_path, ".zarr"))


# ------------------------------------------------------------------ the same on GPU workers

GPU_CASES = {name: params for name, params in CASES.items()
             if name in ("mean-pipeline", "histogram-pipeline", "stencil-pipeline")}


@pytest.fixture(scope="module")
def gpu_session():
    import daskgpu

    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        yield session


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(GPU_CASES))
def test_on_gpu_workers_every_mutation_is_caught(gpu_session, name):
    """CuPy blocks on the workers: the run verifies, every mutation is caught (cuDF pipelines
    need cuDF, which no GPU test of this suite has; they are covered on CPU above)."""
    assert gpu_session.backend.is_gpu
    _check(gpu_session, name, **GPU_CASES[name])
