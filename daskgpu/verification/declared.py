"""A pipeline's check, declared: :class:`Check` holds its steps at each depth and its mutations.

A step is a small function ``step(ctx, result, verdict)``: ``ctx`` the pipeline's typed context
(``workload.context``, a dataclass of the pipeline's own), ``result`` what the check reads of
the computed result (``read(workload, raw)``, or the raw result itself), ``verdict`` the
:class:`~daskgpu.verification.verdict.Verdict` it notes problems and established facts on
(``verdict.depth`` says which depth runs, for steps shared by both). The steps run in order;
the first step that finds a problem ends the check unless ``every_problem`` is set (a later
step may assume what an earlier one established, such as the result's shape).

``full`` must never be weaker than ``fast``: declare it as the fast steps' invariants plus the
exhaustive audit, and let a shared step check every part at ``full``
(:meth:`~daskgpu.verification.plans.Plan.at`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from daskgpu.toolkit.workload import Mutation, Verification, Workload
from daskgpu.verification.depths import checked
from daskgpu.verification.verdict import Verdict

#: ``step(ctx, result, verdict) -> None``.
Step = Callable[[Any, Any, Verdict], None]
#: The steps of one depth: a sequence, or ``steps(ctx) -> sequence`` chosen by the context.
Steps = Sequence[Step] | Callable[[Any], Sequence[Step]]


class Unreadable(Exception):
    """Raised by a check's ``read`` when the result cannot be read: its message is the problem."""


@dataclass(frozen=True)
class Check:
    """A pipeline's answer check: its steps at ``fast`` and at ``full``, and its mutations.

    Parameters
    ----------
    fast, full : sequence of steps, or a function of the context that returns one
        What each depth runs (see the module docstring).
    read : callable, optional
        ``read(workload, raw) -> result``: what the steps read (a typed view of the computed
        result, the value the run reports, the outputs it wrote). Raise :class:`Unreadable` for
        a result that cannot be checked at all. Default: the raw result.
    mutations : sequence of Mutation
        Alterations of the computed result that both depths must catch (see
        :func:`daskgpu.testing.check_pipeline`).
    every_problem : bool
        Run every step even after one found a problem (default: stop at the first).
    release : callable, optional
        ``release(ctx)``: let go what the run kept on the workers for the fast check only
        (shards held for it): called once the fast steps have run, whatever they found, and
        before the full steps start (which draw or read their own data).

    A :class:`Check` is the ``verify`` of ``@daskgpu.pipeline``: calling it runs it.
    """

    fast: Steps
    full: Steps
    read: Callable[[Workload, Any], Any] | None = None
    mutations: Sequence[Mutation] = field(default=())
    every_problem: bool = False
    release: Callable[[Any], None] | None = None

    def steps(self, depth: str, ctx: Any) -> tuple[Step, ...]:
        """The steps that run at ``depth`` for context ``ctx``."""
        chosen = self.fast if checked(depth) == "fast" else self.full
        return tuple(chosen(ctx) if callable(chosen) else chosen)

    def __call__(self, workload: Workload, raw: Any, depth: str = "fast") -> Verification:
        """Check ``raw``, the computed result of ``workload``, at ``depth``."""
        verdict = Verdict(checked(depth))
        try:
            result = raw if self.read is None else self.read(workload, raw)
        except Unreadable as exc:
            verdict.fail(str(exc))
            return verdict.verification()
        ctx = workload.context
        if verdict.depth == "full" and self.release is not None:
            self.release(ctx)
        try:
            for step in self.steps(verdict.depth, ctx):
                step(ctx, result, verdict)
                if not verdict.ok and not self.every_problem:
                    break
        finally:
            if verdict.depth == "fast" and self.release is not None:
                self.release(ctx)
        return verdict.verification()
