"""The pipeline registry: specs, the ``@pipeline`` decorator, and lookup.

Built-in pipelines and third-party ones register the same way: a package named in the
entry-point group ``daskgpu.pipelines`` is imported on first lookup, and the ``@pipeline``
decorators in it register its pipelines. A plugin that fails to import gives a warning, not a
crash.
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from daskgpu.errors import ParameterError, UnknownPipeline
from daskgpu.params import Param

ENTRY_POINT_GROUP = "daskgpu.pipelines"


@dataclass
class Workload:
    """A built, not yet computed, pipeline run.

    Attributes
    ----------
    collection : dask collection, or dict of them
        The lazy graph; computing it gives the pipeline's value. A dict's collections are
        computed together, so parts they share are computed once.
    elements : int
        Elements the computation reads (for elements/s).
    nbytes : int
        Bytes the computation reads (for GB/s).
    description : dict
        What a report shows about the data (shape, chunks, dtype, source).
    context : dict
        What the pipeline's ``verify`` needs.
    outputs : list of (str, str)
        ``(temporary, final)`` paths the computation writes: renamed into place when it
        succeeds, removed when it fails (see :mod:`daskgpu.output`).
    present : callable, optional
        ``present(workload, raw) -> value``: the reported value, from the computed result
        (which may carry extra material for ``verify``). Default: the result itself.
    save : callable, optional
        ``save(workload, value)``: write a small result after computing (``--output``).
    """

    collection: Any
    elements: int
    nbytes: int
    description: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    present: Callable[[Workload, Any], Any] | None = None
    save: Callable[[Workload, Any], None] | None = None


@dataclass(frozen=True)
class Verification:
    """Whether a result checked out, and what was checked."""

    ok: bool
    detail: str


@dataclass(frozen=True)
class Pipeline:
    """A named workload with typed parameters, a graph builder and its own answer check.

    ``baseline(backend, **resolved_params) -> float``, when given, is the same computation in
    one process without Dask (NumPy/pandas on CPU, CuPy/cuDF on one GPU worker), on the same data
    or the same size; it returns the seconds of the computation alone (see :mod:`daskgpu.bench`).
    """

    name: str
    summary: str
    params: tuple[Param, ...]
    prepare: Callable[..., Workload]
    verify: Callable[[Workload, Any], Verification]
    check: Callable[..., None] | None = None
    baseline: Callable[..., float] | None = None

    def param(self, name: str) -> Param:
        """The declared parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def resolve(self, **given: Any) -> dict:
        """Validate user values and fill defaults, before any cluster starts.

        Raises
        ------
        ParameterError
            For an unknown parameter name (with a suggestion) or a bad value.
        DaskGPUError
            From the pipeline's own ``check`` (a missing or malformed input file, ...).
        """
        names = [p.name for p in self.params]
        for key in given:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ParameterError(
                    f"{self.name} has no parameter {key!r}{hint} (parameters: {', '.join(names)})"
                )
        resolved = {p.name: p.convert(given.get(p.name)) for p in self.params}
        if self.check is not None:
            self.check(**resolved)
        return resolved

    def outputs(self, resolved: dict) -> dict[str, str]:
        """The files a run with ``resolved`` parameters writes: ``{option: path}``."""
        return {p.option: resolved[p.name] for p in self.params
                if p.is_output and resolved.get(p.name) is not None}

    def check_outputs(self, resolved: dict, overwrite: bool = False) -> None:
        """Refuse to replace an existing output unless ``overwrite``, before any work starts.

        Parameters
        ----------
        resolved : dict
            Parameters from :meth:`resolve`.
        overwrite : bool
            Whether an existing output may be replaced (``--overwrite``).

        Raises
        ------
        ParameterError
            Naming the output that exists and the two ways on.
        """
        if overwrite:
            return
        for option, path in self.outputs(resolved).items():
            if os.path.lexists(path):
                raise ParameterError(
                    f"{option} {path} exists; pass --overwrite (overwrite=True in Python) to "
                    "replace it, or choose another path"
                )

    def build(self, backend, **params: Any):
        """The lazy Dask collection of this pipeline, to compute or compose.

        Parameters
        ----------
        backend : Backend
            Where it will run (``daskgpu.backends.get("cpu")`` for NumPy chunks).
        **params
            Pipeline parameters; defaults fill the rest.
        """
        return self.workload(backend, **params).collection

    def workload(self, backend, **params: Any) -> Workload:
        """Resolve parameters and build the workload with ``backend`` active."""
        resolved = self.resolve(**params)
        with backend.activate():
            return self.prepare(backend, **resolved)


_REGISTRY: dict[str, Pipeline] = {}
_plugins_loaded = False


def pipeline(
    name: str,
    summary: str,
    params: tuple[Param, ...] | list[Param],
    verify: Callable[[Workload, Any], Verification],
    check: Callable[..., None] | None = None,
    *,
    baseline: Callable[..., float] | None = None,
) -> Callable[[Callable[..., Workload]], Pipeline]:
    """Register the decorated ``prepare(backend, **params) -> Workload`` as a pipeline.

    ``verify(workload, value)`` checks the answer; the optional ``check(**params)`` refuses bad
    parameters that need more than a parser (an unreadable input file) before a cluster starts.
    The optional ``baseline(backend, **params) -> float`` times the same computation in one
    process without Dask, for ``cli.py bench``; on GPU it runs on one worker, never the client.
    """

    def register(prepare: Callable[..., Workload]) -> Pipeline:
        spec = Pipeline(name, summary, tuple(params), prepare, verify, check, baseline)
        if name in _REGISTRY and _REGISTRY[name].prepare is not prepare:
            raise ValueError(f"pipeline {name!r} is registered twice")
        _REGISTRY[name] = spec
        return spec

    return register


def _load_plugins() -> None:
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not break the others
            warnings.warn(
                f"daskgpu: pipeline plugin {ep.name!r} ({ep.value}) failed to load: {exc}",
                RuntimeWarning,
                stacklevel=2,
            )


def names() -> list[str]:
    """Names of every registered pipeline, sorted."""
    _load_plugins()
    return sorted(_REGISTRY)


def get(name: str) -> Pipeline:
    """The pipeline called ``name``.

    Raises
    ------
    UnknownPipeline
        Naming the closest match and every available pipeline.
    """
    _load_plugins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    close = difflib.get_close_matches(name, list(_REGISTRY), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    available = ", ".join(sorted(_REGISTRY)) or "none"
    raise UnknownPipeline(f"no pipeline named {name!r}; {hint}available: {available}")
