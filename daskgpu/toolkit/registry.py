"""The pipeline registry: specs, the ``@pipeline`` decorator, parameter resolution and lookup.

Built-in pipelines (the ``pipelines`` package next to daskgpu) are imported on first lookup,
only the one asked for; third-party ones register the same way through the entry-point group
``daskgpu.pipelines``, loaded when a name is not a built-in or every name is listed. A plugin
that fails to import gives a warning, not a crash.

A pipeline's parameters are resolved once, into a frozen :class:`Resolved`: every value as it
will be used (defaults chosen for the backend, a fresh seed drawn) and the input sources already
opened and checked. Build, verify, baseline and report all read that one object.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from daskgpu.errors import ParameterError, UnknownPipeline, pipeline_code, python_names
from daskgpu.toolkit.params import Param
from daskgpu.toolkit.workload import Mutation, Verification, Workload

if TYPE_CHECKING:
    from daskgpu.toolkit.backends import Backend

__all__ = ["Mutation", "Pipeline", "Resolved", "Verification", "Workload", "get", "names",
           "pipeline"]

ENTRY_POINT_GROUP = "daskgpu.pipelines"
BUILTIN_PACKAGE = "pipelines"


@dataclass(frozen=True)
class Resolved:
    """A pipeline's parameters, resolved once for one backend.

    Attributes
    ----------
    pipeline : str
        The pipeline's name.
    backend : Backend
        What the run computes on (the defaults depend on it).
    values : mapping
        Every parameter as really used: given, defaulted, or chosen (a drawn seed, a size
        sized for the devices). ``resolved["size"]`` reads one.
    inputs : mapping
        Input sources opened and checked while resolving, by parameter name (an
        :class:`~daskgpu.data.array_input.ArraySource`, a
        :class:`~daskgpu.data.table_input.TableSource`).
    """

    pipeline: str
    backend: Backend
    values: Mapping[str, Any]
    inputs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))
        object.__setattr__(self, "inputs", MappingProxyType(dict(self.inputs)))

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The value of parameter ``name``, or ``default`` where the pipeline has none."""
        return self.values.get(name, default)

    def __reduce__(self):  # mapping proxies do not pickle; a baseline may run on a worker
        return (Resolved, (self.pipeline, self.backend, dict(self.values), dict(self.inputs)))

    def as_dict(self) -> dict:
        """The values as a plain dict (for JSON)."""
        return dict(self.values)


def fresh_seed() -> int:
    """A new random seed from the operating system's entropy (reported, so a run can repeat)."""
    import numpy as np

    return int(np.random.SeedSequence().generate_state(1)[0])


@dataclass(frozen=True)
class Pipeline:
    """A named workload with typed parameters, a graph builder and its own answer check.

    Hooks (module-level functions of the pipeline):

    - ``prepare(resolved) -> Workload``: the lazy graph.
    - ``verify(workload, raw, depth) -> Verification``: the answer check, at ``depth`` "fast"
      (the default: at most about a tenth of the compute) or "full" (the exhaustive audit). A
      ``verify(workload, raw)`` that takes no depth is one check for both, reported as "full".
    - ``settle(backend, values) -> (values, inputs)``, optional: fill what depends on the
      backend (default sizes) and open and check the inputs, once, before any cluster starts.
    - ``baseline(resolved) -> (seconds, answer)``, optional: the same computation in one process
      without Dask (NumPy/pandas on CPU, CuPy/cuDF on one GPU worker), on the same data: its
      seconds, and its answer in the form of the run's reported value (host objects), which
      ``bench`` compares with the run's before it reports a ratio.
    - ``mutations``: alterations of the computed result that ``verify`` must catch (a test
      applies each one and requires a failed verification naming what disagreed).
    - ``warm_up(backend_name)``, optional: run on each worker of a cluster started for this
      pipeline while it starts, so the first compute does not pay for it: load the kernels'
      CPU twins from Numba's cache (tiny inputs). Importing the module happens anyway.
    - ``worker_modules``, optional: modules the pipeline's tasks import on a worker that the
      client need not (its Numba kernels, imported inside the tasks). A cluster's CPU workers
      find them imported: the server they are forked from imports them once, with the
      pipeline's module.

    ``verify`` runs in the client with the run's cluster as Dask's scheduler: its independent
    recomputations are Dask graphs computed where the data lives, and only small results come
    back.
    """

    name: str
    summary: str
    params: tuple[Param, ...]
    prepare: Callable[[Resolved], Workload]
    verify: Callable[[Workload, Any], Verification]
    settle: Callable[[Backend, dict], tuple[dict, dict]] | None = None
    baseline: Callable[[Resolved], tuple[float, Any]] | None = None
    mutations: tuple[Mutation, ...] = ()
    warm_up: Callable[[str], None] | None = None
    worker_modules: tuple[str, ...] = ()

    def check(self, workload: Workload, raw: Any, depth: str = "fast") -> Verification:
        """Check ``raw``, the computed result of ``workload``, at ``depth``.

        Parameters
        ----------
        depth : {"fast", "full"}
            The depth asked for (see :mod:`daskgpu.verification.depths`). A ``verify`` that
            takes no depth runs its one check, and the verification says "full".

        Returns
        -------
        Verification
            With ``depth`` set to the depth that ran.
        """
        from daskgpu.verification import depths

        depth = depths.checked(depth)
        with pipeline_code(self.name, "verify"):
            if "depth" in inspect.signature(self.verify).parameters:
                return replace(self.verify(workload, raw, depth=depth), depth=depth)
            return replace(self.verify(workload, raw), depth="full")

    @property
    def param_names(self) -> tuple[str, ...]:
        """The Python names of the declared parameters, in order."""
        return tuple(p.name for p in self.params)

    def param(self, name: str) -> Param:
        """The declared parameter called ``name``."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)

    def resolve(self, backend: Backend | None = None, **given: Any) -> Resolved:
        """Validate user values, fill defaults and open inputs, before any cluster starts.

        Parameters
        ----------
        backend : Backend, optional
            Where it will run (default: CPU); default sizes are chosen for it.
        **given
            Parameter values; unset ones take their defaults.

        Raises
        ------
        ParameterError
            For an unknown parameter name (with a suggestion) or a bad value.
        DaskGPUError
            From the pipeline's ``settle`` (a missing or malformed input file, ...).
        """
        names = [p.name for p in self.params]
        for key in given:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise ParameterError(
                    f"{self.name} has no parameter {key!r}{hint} (parameters: {', '.join(names)})"
                )
        if backend is None:
            from daskgpu.toolkit import backends

            backend = backends.get("cpu")
        values = {p.name: p.convert(given.get(p.name)) for p in self.params}
        inputs: dict = {}
        if self.settle is not None:
            with pipeline_code(self.name, "settle"):
                values, inputs = self.settle(backend, values)
        if not self.prepare.__module__.startswith("pipelines."):  # built-ins check their own
            from daskgpu.toolkit import chunking

            chunking.check_declared(values, backend)
        # Generated data gets a seed (drawn, and reported); data read from an input has none.
        if "seed" in values and values["seed"] is None and values.get("input") is None:
            values["seed"] = fresh_seed()
        return Resolved(self.name, backend, values, inputs)

    def resolve_for_run(self, backend: Backend | None, overwrite: bool = False,
                        **given: Any) -> Resolved:
        """:meth:`resolve`, then :meth:`check_outputs`: everything a run refuses up front."""
        resolved = self.resolve(backend, **given)
        self.check_outputs(resolved, overwrite=overwrite)
        return resolved

    def outputs(self, resolved: Resolved | Mapping) -> dict[str, str]:
        """The files a run with ``resolved`` parameters writes: ``{option: path}``."""
        return {p.option: resolved[p.name] for p in self.params
                if p.is_output and resolved[p.name] is not None}

    def check_outputs(self, resolved: Resolved | Mapping, overwrite: bool = False) -> None:
        """Refuse to replace an existing output unless ``overwrite``, before any work starts.

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

    def build(self, backend: Backend, presented: bool = False, **params: Any):
        """The lazy Dask collection of this pipeline, to compute or compose.

        Parameters
        ----------
        backend : Backend
            Where it will run (``daskgpu.get_backend("cpu")`` for NumPy chunks).
        presented : bool, default False
            False: the collection the run computes, whose value is the pipeline's raw result,
            the one its ``verify`` checks (the mean pipeline's: a float carrying its block
            sums; others': a dict of the answer and its certificates), to compose with your
            own Dask code. True: a ``dask.delayed`` value that computes to what
            ``daskgpu.run`` reports as ``result.value`` (the pipeline's ``present`` applied).
        **params
            Pipeline parameters; defaults fill the rest.

        Returns
        -------
        dask collection
            Lazy; nothing is computed and no output is written (outputs are the run's).
        """
        workload = self.workload(backend, **params)
        if not presented or workload.present is None:
            return workload.collection
        import dask

        # The workload rides in the function: as an argument, Dask would compute the
        # collections its context holds (the data itself) before present saw them.
        return dask.delayed(functools.partial(_present, workload), pure=False)(
            workload.collection)

    def workload(self, backend: Backend, resolved: Resolved | None = None,
                 **params: Any) -> Workload:
        """Build the workload with ``backend`` active, from ``resolved`` or from ``params``."""
        if resolved is None:
            with python_names():  # called from Python: errors name ``size=``, not ``--size``
                resolved = self.resolve(backend, **params)
        with backend.activate(), pipeline_code(self.name, "prepare"):
            built = self.prepare(resolved)
        built.resolved = resolved
        return built


def _present(workload: Workload, raw: Any) -> Any:
    return workload.present(workload, raw)


_REGISTRY: dict[str, Pipeline] = {}
_plugins_loaded = False


def pipeline(
    name: str,
    summary: str,
    params: tuple[Param, ...] | list[Param],
    verify: Callable[[Workload, Any], Verification],
    *,
    settle: Callable[[Backend, dict], tuple[dict, dict]] | None = None,
    baseline: Callable[[Resolved], tuple[float, Any]] | None = None,
    mutations: tuple[Mutation, ...] | list[Mutation] = (),
    warm_up: Callable[[str], None] | None = None,
    worker_modules: tuple[str, ...] | list[str] = (),
) -> Callable[[Callable[[Resolved], Workload]], Pipeline]:
    """Register the decorated ``prepare(resolved) -> Workload`` as a pipeline.

    ``verify(workload, raw, depth)`` checks the answer at ``depth`` ("fast" or "full"; see
    :meth:`Pipeline.check`; a ``verify(workload, raw)`` is one check for both): a
    :class:`daskgpu.verification.Check` declares one, and its mutations stand for
    ``mutations``. The optional
    ``settle(backend, values)`` returns ``(values, inputs)``: the values with backend-dependent
    defaults filled in, and the input sources it opened and checked (refusing bad ones before a
    cluster starts). The optional ``baseline(resolved) -> (seconds, answer)`` times the same
    computation in one process without Dask, for ``bench``, and returns its answer in the run's
    reported form (the two are compared before a ratio is printed); on GPU it runs on one worker,
    never the client. ``mutations`` are alterations of the result that ``verify`` must catch at
    every depth (see :class:`Mutation`). The optional ``warm_up(backend_name)`` readies a worker
    for the pipeline as it starts; ``worker_modules`` names modules its tasks import on a worker
    only (see :class:`Pipeline`).
    """
    # A declared check (daskgpu.verification.Check) carries its own mutations.
    declared = tuple(mutations) or tuple(getattr(verify, "mutations", ()))

    def register(prepare: Callable[[Resolved], Workload]) -> Pipeline:
        spec = Pipeline(name, summary, tuple(params), prepare, verify, settle, baseline,
                        declared, warm_up, tuple(worker_modules))
        if name in _REGISTRY and not _redefines(_REGISTRY[name].prepare, prepare):
            raise ValueError(f"pipeline {name!r} is registered twice")
        _REGISTRY[name] = spec
        return spec

    return register


def worker_function(module: str, name: str) -> Callable:
    """``module.name``, with ``module`` imported on the first call rather than now.

    For a pipeline's tasks to call a function of one of its ``worker_modules`` (a Numba
    kernel, say): the client, which imports the tasks' module to build the graph, never imports
    that module; the workers find it imported by the process they are forked from.
    """

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f":func:`{module}.{name}`, its module imported on the first call."
    return call


def _redefines(registered: Callable, prepare: Callable) -> bool:
    """Whether ``prepare`` may take the place of ``registered`` under the same name.

    The same function, or the same definition run again: a notebook cell or a script
    (``__main__``) re-run, or its module reloaded. Another module claiming the name may not.
    """
    if registered is prepare:
        return True
    same_module = registered.__module__ == prepare.__module__
    return same_module and (prepare.__module__ == "__main__"
                            or registered.__qualname__ == prepare.__qualname__)


def _builtin_package():
    try:
        return importlib.import_module(BUILTIN_PACKAGE)
    except ModuleNotFoundError as exc:
        if exc.name != BUILTIN_PACKAGE:
            raise
        return None  # daskgpu installed without its pipelines


def _builtins() -> dict[str, str]:
    """``{name: module}`` of the built-in pipelines (empty where the package is not there)."""
    return dict(getattr(_builtin_package(), "BUILTIN", {}))


def builtin_module(name: str) -> str | None:
    """The module of built-in pipeline ``name``, not imported; None for any other name."""
    return _builtins().get(name)


def _load_builtin(name: str) -> None:
    module = _builtins().get(name)
    if module is not None and name not in _REGISTRY:
        importlib.import_module(module)


def _load_plugins() -> None:
    """Import the third-party pipelines (entry points); built-ins load one by one, when asked."""
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
    """Names of every available pipeline, sorted (imports the plugins, not the built-ins)."""
    _load_plugins()
    return sorted(set(_builtins()) | set(_REGISTRY))


def summaries() -> dict[str, str]:
    """``{name: one-line summary}`` of every available pipeline, without importing built-ins.

    A built-in's summary is its package's ``SUMMARY`` (the package's ``__init__``, which its
    ``@pipeline`` also gives); a registered pipeline's is its own.
    """
    _load_plugins()
    out = {name: spec.summary for name, spec in _REGISTRY.items()}
    for name, module in _builtins().items():
        if name not in out:
            package = importlib.import_module(module.rpartition(".")[0])
            out[name] = getattr(package, "SUMMARY", None) or get(name).summary
    return dict(sorted(out.items()))


def loaded() -> list[Pipeline]:
    """The pipelines registered in this process so far (no module is imported to find more)."""
    return list(_REGISTRY.values())


def get(name: str) -> Pipeline:
    """The pipeline called ``name``.

    Raises
    ------
    UnknownPipeline
        Naming the closest match and every available pipeline.
    """
    _load_builtin(name)
    if name in _REGISTRY:
        return _REGISTRY[name]
    _load_plugins()
    if name in _REGISTRY:
        return _REGISTRY[name]
    available = names()
    close = difflib.get_close_matches(name, available, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UnknownPipeline(f"no pipeline named {name!r}; {hint}available: "
                          f"{', '.join(available) or 'none'}")
