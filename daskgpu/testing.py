"""Testing a pipeline as its author: its check passes the right answer and catches wrong ones.

:func:`check_pipeline` runs a pipeline small on a CPU cluster (or the session given), as
``daskgpu.run`` does, and requires that the unaltered result verifies and that every declared
:class:`~daskgpu.toolkit.workload.Mutation` of it fails verification naming what disagreed, at
every depth the pipeline's ``verify`` has. Call it from a test (pytest or any other): a
failure is an ``AssertionError`` in one line naming the pipeline, the depth and the detail.

>>> from daskgpu.testing import check_pipeline
>>> report = check_pipeline("mean-pipeline", size=600, chunks=200, seed=3)  # doctest: +SKIP
>>> print(report)  # doctest: +SKIP
mean-pipeline verifies at fast and full; 8 mutations caught at each: constant 0.5, ...
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import dask

from daskgpu.clusters import session as sessions
from daskgpu.errors import python_names
from daskgpu.execution import faults, runner, task_errors
from daskgpu.toolkit import output, registry
from daskgpu.toolkit.registry import Pipeline
from daskgpu.toolkit.workload import Mutation, Verification, Workload
from daskgpu.verification import depths

__all__ = ["CaughtMutation", "CheckReport", "check_pipeline", "compute_as_a_run"]

#: The depths a pipeline's check can run at (``off`` checks nothing).
VERIFY_DEPTHS = depths.CHECKED


@dataclass(frozen=True)
class CaughtMutation:
    """One declared mutation, caught at one depth.

    Attributes
    ----------
    mutation : str
        The mutation's name.
    depth : str
        The depth whose check caught it.
    detail : str
        The failed verification's detail (it names what disagreed).
    """

    mutation: str
    depth: str
    detail: str


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_pipeline` checked; ``str(report)`` says it in one line.

    Attributes
    ----------
    pipeline : str
        The pipeline's name.
    params : mapping
        Every parameter as it was used (defaults filled in, a drawn seed).
    depths : tuple of str
        The depths checked: those asked for, or ``("full",)`` for a ``verify`` without depths.
    verified : mapping
        ``{depth: detail}`` of the unaltered result's verification.
    caught : tuple of CaughtMutation
        Every declared mutation (but those skipped) at every depth in ``depths``.
    skipped : tuple of str
        The mutations left out by ``skip_mutations``.
    value : object
        The run's reported value (the unaltered result through the pipeline's ``present``),
        for a test to compare with an answer it knows.
    """

    pipeline: str
    params: Mapping[str, Any]
    depths: tuple[str, ...]
    verified: Mapping[str, str]
    caught: tuple[CaughtMutation, ...]
    skipped: tuple[str, ...] = ()
    value: Any = None

    def __str__(self) -> str:
        names = list(dict.fromkeys(c.mutation for c in self.caught))
        skipped = f" ({len(self.skipped)} skipped)" if self.skipped else ""
        mutations = f"{len(names)} mutation{'s' if len(names) != 1 else ''} caught"
        at_each = " at each" if len(self.depths) > 1 else ""
        return (f"{self.pipeline} verifies at {' and '.join(self.depths)}; "
                f"{mutations}{at_each}{skipped}: {', '.join(names)}")


def check_pipeline(
    pipeline: str | Pipeline,
    /,
    *,
    session=None,
    depths: Iterable[str] = VERIFY_DEPTHS,
    skip_mutations: Iterable[str] = (),
    **small_params: Any,
) -> CheckReport:
    """Run a pipeline small and require that its check passes its answer and catches mutations.

    The pipeline is built and computed as ``daskgpu.run`` does, and its ``verify`` then runs
    with the cluster as Dask's scheduler, at each depth: the unaltered result must verify;
    each declared mutation, applied to a deep copy of it, must fail verification with a
    one-line detail that ``mutation.names`` matches; and the unaltered result must verify again
    afterwards (``verify`` kept no state).

    Parameters
    ----------
    pipeline : str or Pipeline
        A registered name (a built-in, a plugin, or one your test module defined with
        ``@daskgpu.pipeline``), or the :class:`~daskgpu.Pipeline` the decorator returned.
    session : Session or distributed.Client, optional
        Where to compute. Default: a CPU cluster of two one-thread workers started for this
        call and closed after it (seconds; pass a session shared by your tests instead).
    depths : iterable of {"fast", "full"}, default both
        The depths to check. A ``verify(workload, raw)`` without a ``depth`` parameter has one
        check: it runs once, as ``"full"``.
    skip_mutations : iterable of str
        Names of declared mutations to leave out (what a run on these parameters does not
        report, for example); each must be declared.
    **small_params
        The pipeline's parameters: small enough to run in seconds, large enough for several
        blocks or partitions (a check of one block proves little).

    Returns
    -------
    CheckReport
        What was checked; ``print(report)`` says it in one line.

    Raises
    ------
    AssertionError
        In one line naming the pipeline and the depth: the pipeline declares no mutations
        (its check cannot be shown to fail), the unaltered result does not verify, a mutation
        still verifies or fails without naming what disagreed, a detail is not one line, or the
        unaltered result no longer verifies after the mutations.
    ValueError
        A depth other than fast or full, or a skipped mutation that is not declared.
    DaskGPUError
        As ``daskgpu.run`` raises them: a bad parameter (before anything starts), a task that
        failed on a worker, an exception in one of the pipeline's hooks (``PipelineFailed``).
    """
    with python_names():
        spec = registry.get(pipeline) if isinstance(pipeline, str) else pipeline
    mutations, skipped = _mutations_to_apply(spec, tuple(skip_mutations))
    checked = _depths_checked(spec, tuple(depths))
    with _session_for(session) as chosen:
        workload, raw = compute_as_a_run(spec, chosen, **small_params)
        try:
            verified, caught = _check_every_depth(spec, chosen, workload, raw, checked,
                                                  mutations)
            value = workload.present(workload, raw) if workload.present else raw
        finally:
            _discard_outputs(workload)  # a test keeps no output
    return CheckReport(spec.name, dict(workload.resolved.values), checked, verified,
                       tuple(caught), skipped, value)


def compute_as_a_run(spec: Pipeline, session, **params: Any) -> tuple[Workload, Any]:
    """Resolve, build and compute ``spec`` on ``session`` as a run does: ``(workload, raw)``.

    ``session`` is a Session or a ``distributed.Client``. ``raw`` is the computed result that
    the pipeline's ``verify`` checks, on the host (a GPU worker's arrays are moved to host
    memory on the worker); a ``drive`` hook drives the computation where the workload has one.
    Output files the computation writes stay temporaries (``workload.outputs``): yours to
    discard. Nothing is verified.
    """
    session = sessions.for_client(session)
    backend = session.backend
    with python_names():
        resolved = spec.resolve_for_run(backend, **params)
    watched = faults.WatchedClient(session.client, backend.devices)
    with task_errors.explained(session.client, backend.devices), python_names():
        with dask.config.set(scheduler=watched), \
                output.discarding_new_temporaries(spec.outputs(resolved).values()):
            workload = spec.workload(backend, resolved)
        try:
            if workload.drive is not None:
                return workload, watched.drive(workload)
            return workload, runner.compute(session.client, workload.collection, backend)
        except BaseException:
            _discard_outputs(workload)
            raise


def _discard_outputs(workload: Workload) -> None:
    for temporary, _final in workload.outputs:
        output.discard(temporary)


def _mutations_to_apply(spec: Pipeline, skip: tuple[str, ...]):
    declared = {m.name for m in spec.mutations}
    unknown = sorted(set(skip) - declared)
    if unknown:
        raise ValueError(f"{spec.name} declares no mutation named {', '.join(map(repr, unknown))}"
                         f" (declared: {', '.join(map(repr, sorted(declared))) or 'none'})")
    mutations = tuple(m for m in spec.mutations if m.name not in skip)
    if not mutations:
        raise AssertionError(
            f"{spec.name}: no mutations to apply, so its check cannot be shown to fail: declare "
            "the alterations of its result that verify must catch, "
            "@daskgpu.pipeline(..., mutations=(daskgpu.Mutation(name, alter, names), ...))")
    return mutations, tuple(m.name for m in spec.mutations if m.name in skip)


def _depths_checked(spec: Pipeline, depths: tuple[str, ...]) -> tuple[str, ...]:
    """The depths to check: ``depths``, or only "full" for a ``verify`` without depths."""
    wrong = [d for d in depths if d not in VERIFY_DEPTHS]
    if wrong or not depths:
        raise ValueError(f"depths={depths!r}: choose from {', '.join(VERIFY_DEPTHS)}")
    if "depth" not in inspect.signature(spec.verify).parameters:
        return ("full",)  # Pipeline.check runs its one check at any depth, as "full"
    return tuple(dict.fromkeys(depths))


@contextlib.contextmanager
def _session_for(session):
    if session is not None:
        yield sessions.for_client(session)
        return
    with sessions.cluster(cpu=True, workers=2, threads_per_worker=1, dashboard=False) as started:
        yield started


def _check_every_depth(spec, session, workload, raw, depths, mutations):
    verified, caught, escaped = {}, [], []
    for depth in depths:
        check = _verify(spec, session, workload, copy.deepcopy(raw), depth)
        _require(check.ok, spec, depth, "the unaltered result does not verify", check)
        _require_one_line(spec, depth, check)
        verified[depth] = check.detail
        for mutation in mutations:
            altered = mutation.alter(copy.deepcopy(raw))
            check = _verify(spec, session, workload, altered, depth, mutation)
            problem = _escape(mutation, check)
            if problem is None:
                caught.append(CaughtMutation(mutation.name, depth, check.detail))
            else:
                escaped.append(f"at {depth}, {problem}")
        check = _verify(spec, session, workload, copy.deepcopy(raw), depth)
        _require(check.ok, spec, depth, "the unaltered result verified before the mutations, "
                 "not after them (verify keeps state)", check)
    if escaped:
        raise AssertionError(f"{spec.name}: {len(escaped)} of {len(mutations) * len(depths)} "
                             f"mutation checks failed: {'; '.join(escaped)}")
    return verified, caught


def _verify(spec: Pipeline, session, workload: Workload, raw: Any, depth: str,
            mutation: Mutation | None = None) -> Verification:
    """``spec.check`` at ``depth`` with the cluster as Dask's scheduler, as a run checks."""
    client, devices = session.client, session.backend.devices
    try:
        with task_errors.explained(client, devices), \
                dask.config.set(scheduler=faults.WatchedClient(client, devices)):
            return spec.check(workload, raw, depth)
    except Exception as exc:
        if mutation is None:
            raise
        raise AssertionError(f"{spec.name} at {depth}: verifying the result altered by "
                             f"mutation {mutation.name!r} raised {_one_line(str(exc))} "
                             "(a check reports a wrong answer, it does not crash)") from exc


def _escape(mutation: Mutation, check: Verification) -> str | None:
    """Why ``check``, of a result altered by ``mutation``, does not catch it; None if it does."""
    if check.ok:
        return f"mutation {mutation.name!r} still verifies: {_one_line(check.detail)}"
    if "\n" in check.detail:
        return f"mutation {mutation.name!r}: the detail is not one line: {check.detail!r}"
    if not mutation.named_in(check.detail):
        return (f"mutation {mutation.name!r} fails without naming what disagreed (the detail "
                f"must match {mutation.names!r}): {check.detail}")
    return None


def _require(ok: bool, spec: Pipeline, depth: str, what: str, check: Verification) -> None:
    if not ok:
        raise AssertionError(f"{spec.name} at {depth}: {what}: {_one_line(check.detail)}")


def _require_one_line(spec: Pipeline, depth: str, check: Verification) -> None:
    if "\n" in check.detail:
        raise AssertionError(f"{spec.name} at {depth}: the verification detail is not one "
                             f"line: {check.detail!r}")


def _one_line(text: str) -> str:
    return " ".join(text.split()) or "(no detail)"
