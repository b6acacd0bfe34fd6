"""Estimators with scikit-learn's conventions, on daskgpu's pipelines: fitted and verified.

>>> from daskgpu.ml import KMeans  # doctest: +SKIP
>>> model = KMeans(n_clusters=8, random_state=0).fit(X)  # doctest: +SKIP
>>> model.cluster_centers_.shape, model.verified_  # doctest: +SKIP
((8, 32), True)

Each ``fit`` computes where :mod:`daskgpu.ml.base` says (the current ``daskgpu.cluster``
session, or ``session=``; else the current distributed client; else a local cluster started
for the fit) and checks its answer with its pipeline's check (``verify="fast"`` by default):
a wrong answer raises :class:`daskgpu.errors.VerificationFailed`. Names load on first use.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "KMeans": "daskgpu.ml.kmeans",
    "PCA": "daskgpu.ml.pca",
    "MLPClassifier": "daskgpu.ml.mlp",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'daskgpu.ml' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted(_LAZY)
