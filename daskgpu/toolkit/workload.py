"""What building a pipeline produces, and how its answer is judged (Verification, Mutation).

A run checks its answer at one of the depths of :mod:`daskgpu.verification.depths` (``fast``,
the default; ``full``; ``off``); what checks share is in :mod:`daskgpu.verification`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from daskgpu.toolkit.registry import Resolved

@dataclass
class Workload:
    """A built, not yet computed, pipeline run.

    Attributes
    ----------
    collection : dask collection, or dict of them
        The lazy graph; computing it gives the pipeline's value. A dict's collections are
        computed together, so parts they share are computed once.
    elements : int
        Elements the computation reads or generates (for elements/s).
    nbytes : int
        Bytes the computation reads or generates (for GB/s).
    description : dict
        What a report shows about the data (shape, chunks, dtype, source).
    context : dict
        What the pipeline's ``verify`` needs.
    outputs : list of (str, str)
        ``(temporary, final)`` paths the computation writes: renamed into place when it
        succeeds, removed when it fails (see :mod:`daskgpu.toolkit.output`).
    present : callable, optional
        ``present(workload, raw) -> value``: the reported value, from the computed result
        (which may carry extra material for ``verify``). Default: the result itself.
    save : callable, optional
        ``save(workload, value, path)``: write a small result after computing (``--output``) to
        ``path``, a temporary beside the output that the runner renames into place once the
        run has verified (and removes when it has not).
    bytes_are : {"read", "generated", "moved"}
        What ``nbytes`` counts: input read, data generated on the workers, or memory moved
        (read and written) by the computation; throughput says so.
    resolved : Resolved, optional
        The parameters it was built from (set by :meth:`Pipeline.workload`).
    drive : callable, optional
        ``drive(workload, client) -> raw``: an iterative computation driven from the client
        (many small graphs on data the build persisted, e.g. training steps). The runner calls
        it instead of computing ``collection`` and times it as the compute; ``collection``
        stays the same computation as one graph, for whoever computes the workload directly.
        The runner's ``client`` is a :class:`daskgpu.execution.faults.WatchedClient`: waiting
        through its ``wait(futures)`` and ``results(futures)``, a run whose workers are gone ends in
        one line instead of a wait without end.
    on_workers : dict of str to dask collection
        Results as large as the input (a grid, a spectrum, a product), by name. A run from
        Python (:func:`daskgpu.run`) persists them with its compute, so that they are computed
        once and stay on the workers, and adds them to its value (a dict) as Dask collections
        on those persisted blocks; the command line, which has no use for them, does not. A
        ``drive`` may put them there as it makes them (already persisted), where ``keep``.
    keep : bool
        Whether the run keeps ``on_workers`` (set by the runner before it computes): a
        ``drive`` reads it.
    """

    collection: Any
    elements: int
    nbytes: int
    description: dict = field(default_factory=dict)
    context: dict = field(default_factory=dict)
    outputs: list[tuple[str, str]] = field(default_factory=list)
    present: Callable[[Workload, Any], Any] | None = None
    save: Callable[[Workload, Any, str], None] | None = None
    bytes_are: str = "read"
    resolved: Resolved | None = None
    drive: Callable[[Workload, Any], Any] | None = None
    on_workers: dict[str, Any] = field(default_factory=dict)
    keep: bool = False

    def written(self, path: str) -> str:
        """Where output ``path`` is until the run has verified: its temporary (else ``path``).

        A check that reads an output back reads what this run wrote, not an older file.
        """
        for temporary, final in self.outputs:
            if final == path:
                return temporary
        return path


@dataclass(frozen=True)
class Verification:
    """Whether a result checked out, and what was checked.

    Attributes
    ----------
    ok : bool
        Whether every check passed.
    detail : str
        What was checked, and what disagreed where something did.
    depth : str, optional
        The depth that ran (``"fast"`` or ``"full"``), set by :meth:`Pipeline.check`.
    """

    ok: bool
    detail: str
    depth: str | None = None


@dataclass(frozen=True)
class Mutation:
    """A way to alter a pipeline's computed result that its verification must catch.

    Attributes
    ----------
    name : str
        What the alteration is ("bins reversed", "l2_norm set to 0").
    alter : callable
        ``alter(raw) -> raw``: a changed copy of the computed result (never the original).
    names : str
        A regular expression the failed verification's detail must match (``re.search``):
        the quantity that was altered, as the check names it (a group's ``sum_xy``, a bin's
        count), never a word any failure would contain.
    """

    name: str
    alter: Callable[[Any], Any]
    names: str

    def named_in(self, detail: str) -> bool:
        """Whether a failed verification's ``detail`` names the altered quantity.

        >>> Mutation("a bin +1", lambda raw: raw, "bin [0-9]+: [0-9]+ counted").named_in(
        ...     "bin 8: 2554 counted, numpy.histogram 2553")
        True
        """
        return re.search(self.names, detail) is not None
