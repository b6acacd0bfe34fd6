"""Verification that can fail: every built-in pipeline's declared mutations are caught.

Each pipeline is run small on a real CPU cluster; its computed result must verify. Then every
alteration the pipeline declares (``Pipeline.mutations``: a reversed histogram, a doubled sum, a
dropped block, ...) is applied to a copy of that result before ``verify``, which must then fail
with a detail naming what disagreed. A new pipeline cannot skip this: the registry walk below
requires mutations and a small case for every built-in pipeline.
"""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
from conftest import compute_as_runner, verify_on

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


verify = verify_on


class _Computed(dict):
    """Each pipeline's small run, computed when a test first asks for it: one pipeline that
    fails to compute errors its own tests, not every pipeline's."""

    def __init__(self, session, cases):
        super().__init__()
        self.session, self.cases = session, cases

    def __missing__(self, name):
        self[name] = compute_as_runner(self.session, name, **self.cases[name])
        return self[name]


@pytest.fixture(scope="module")
def results(cpu_client):
    return _Computed(cpu_client, CASES)


def _cases():
    return [(name, m) for name in sorted(CASES) if name in registry.names()
            for m in registry.get(name).mutations]


DEPTHS = ("fast", "full")


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_unaltered_result_verifies(cpu_client, results, name, depth):
    spec, workload, raw = results[name]
    check = verify(cpu_client, spec, workload, raw, depth)
    assert check.ok, check.detail


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(("name", "mutation"), _cases(),
                         ids=[f"{n}: {m.name}" for n, m in _cases()])
def test_an_altered_result_fails_and_says_what_disagreed(cpu_client, results, name, mutation,
                                                         depth):
    spec, workload, raw = results[name]
    before = copy.deepcopy(raw)
    altered = mutation.alter(copy.deepcopy(raw))
    check = verify(cpu_client, spec, workload, altered, depth)
    assert not check.ok, f"{name}: {mutation.name} still verifies at {depth}: {check.detail}"
    assert mutation.named_in(check.detail), (mutation.names, check.detail)
    assert "\n" not in check.detail
    # the original still verifies: the mutation altered a copy, and verify kept no state
    assert verify(cpu_client, spec, workload, before, depth).ok


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
def input_results(cpu_client, tmp_path_factory):
    return _Computed(cpu_client, _input_cases(tmp_path_factory.mktemp("inputs")))


@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize("name", INPUT_PIPELINES)
def test_on_an_input_every_reported_alteration_fails(cpu_client, input_results, name, depth):
    """The checks of an input's run differ (re-read, no seeds): each mutation still fails it."""
    spec, workload, raw = input_results[name]
    assert verify(cpu_client, spec, workload, raw, depth).ok
    for mutation in spec.mutations:
        if (name, mutation.name) in NOT_REPORTED_FOR_INPUTS:
            continue
        check = verify(cpu_client, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
        assert not check.ok, (f"{name} on an input: {mutation.name} still verifies at {depth}: "
                              f"{check.detail}")
        assert mutation.named_in(check.detail), (name, mutation.names, check.detail)
        assert "\n" not in check.detail


# ------------------------------------------------------------------ the same on GPU workers

GPU_CASES = {name: params for name, params in CASES.items()
             if name in ("mean-pipeline", "histogram-pipeline", "stencil-pipeline")}


@pytest.fixture(scope="module")
def gpu_session():
    import daskgpu

    with daskgpu.cluster(gpus="0", dashboard=False) as session:
        yield session


def _gpu_cases():
    return [(name, m) for name in sorted(GPU_CASES) for m in registry.get(name).mutations]


@pytest.mark.gpu
@pytest.mark.parametrize("depth", DEPTHS)
@pytest.mark.parametrize(("name", "mutation"), _gpu_cases(),
                         ids=[f"{n}: {m.name}" for n, m in _gpu_cases()])
def test_on_gpu_workers_an_altered_result_fails(gpu_session, name, mutation, depth):
    """CuPy blocks on the workers: the run verifies, every mutation is caught (cuDF pipelines
    need cuDF, which no GPU test of this suite has; they are covered on CPU above)."""
    spec, workload, raw = compute_as_runner(gpu_session, name, **GPU_CASES[name])
    assert gpu_session.backend.is_gpu
    assert verify(gpu_session, spec, workload, raw, depth).ok
    check = verify(gpu_session, spec, workload, mutation.alter(copy.deepcopy(raw)), depth)
    assert not check.ok and mutation.named_in(check.detail), check.detail
