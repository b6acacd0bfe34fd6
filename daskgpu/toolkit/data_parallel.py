"""Data-parallel steps on a cluster: persisted shards, a broadcast model, a tree-reduced sum.

The pattern of multi-GPU training, the Dask way. The data are shards placed once on the
workers, round-robin (one or a few per worker, never moved afterwards); each step broadcasts
the small model to every worker, runs one task per shard where its data lives, and sums the
shards' partial results pairwise (a tree reduction: the allreduce), so that only the summed
result reaches the driver. The driver is any ``distributed.Client``: the run's own client,
or a worker's (:func:`drive_on_cluster`) where the computation must be one task of a graph.

A shard's task returns ``(partial, seconds)``: its partial result (host objects that
``combine`` adds) and the seconds it computed, so that a step's time splits into compute
(the slowest shard) and the rest (scheduling, the reduction's transfers, the broadcast).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from daskgpu.errors import DaskGPUError, ParameterError
from daskgpu.toolkit.chunking import MAX_BLOCK_BYTES

MAX_SHARDS = 4096  # each step runs one task per shard


@dataclass(frozen=True)
class StepTime:
    """Where one step's seconds went.

    Attributes
    ----------
    wall_s : float
        The whole step, as the driver saw it: shard tasks, reduction, result, broadcast.
    compute_s : float
        The slowest shard task's own computing time.
    """

    wall_s: float
    compute_s: float

    @property
    def communication_s(self) -> float:
        """The rest of the step: scheduling, moving partial results, broadcasting the model."""
        return max(0.0, self.wall_s - self.compute_s)


class ShardKeys:
    """The keys of persisted shards, opaque to Dask's graph builders.

    A ``dask.delayed`` call walks lists, dicts and dataclasses for collections and futures
    (and would move every shard into its task); this plain object pickles as the key names
    only, while in the client it holds the shards' futures, keeping them alive as long as it
    is (a collection built with it, say), or until :meth:`release`.
    """

    def __init__(self, keys: Sequence, futures: Sequence = ()):
        self.keys = tuple(keys)
        self.futures = list(futures)

    @classmethod
    def holding(cls, futures: Sequence) -> ShardKeys:
        """The keys of ``futures``, holding them."""
        return cls([f.key for f in futures], futures)

    def release(self) -> None:
        """Let the cluster forget the shards (once nothing else holds them)."""
        for future in self.futures:
            future.release()
        self.futures = []

    def __reduce__(self):
        return (ShardKeys, (self.keys,))


def worker_addresses(client) -> list[str]:
    """The addresses of the cluster's workers, sorted."""
    from daskgpu.toolkit.backends import scheduler_workers

    return sorted(scheduler_workers(client))


def place(client, make: Callable, arguments: Sequence[tuple], workers: Sequence[str] | None = None,
          offset: int = 0) -> list:
    """Make one shard per tuple of ``arguments`` on the workers, round-robin; keep them there.

    Parameters
    ----------
    client : distributed.Client
    make : callable
        ``make(*args)`` builds one shard where it runs.
    arguments : sequence of tuple
        One tuple of arguments per shard.
    workers : sequence of str, optional
        Worker addresses to place the shards on (default: every worker).
    offset : int
        The worker of shard 0, counted round-robin (place a second set of shards after the
        first).

    Returns
    -------
    list of distributed.Future
        One per shard, each placed on its worker; the restriction is loose, so a shard whose
        worker is lost is made again on another (``make`` must then give the same shard).
    """
    workers = list(workers) if workers is not None else worker_addresses(client)
    return [client.submit(make, *args, workers=[workers[(offset + i) % len(workers)]],
                          allow_other_workers=True, pure=False)
            for i, args in enumerate(arguments)]


def broadcast(client, value):
    """``value`` (small) copied to every worker at once; a Future to pass to shard tasks."""
    return client.scatter(value, broadcast=True, hash=False)


def tree_reduce(client, futures: Sequence, combine: Callable):
    """Sum ``futures`` pairwise with ``combine(a, b)`` on the workers; a Future of the total.

    Neighbours are combined first (shards ``0+1``, ``2+3``, ...), so a total is reached in
    ``ceil(log2(n))`` rounds and its order of additions does not depend on timing.
    """
    level = list(futures)
    if not level:
        raise ValueError("nothing to reduce")
    while len(level) > 1:
        paired = [client.submit(combine, level[i], level[i + 1], pure=False)
                  for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def step(client, shards: Sequence, task: Callable, combine: Callable, *args: Any
         ) -> tuple[Any, StepTime]:
    """One step: ``task(shard, *args)`` on every shard, tree-reduced, gathered.

    ``task`` returns ``(partial, seconds)`` and ``combine`` adds two such pairs (the partials
    summed, the larger of the seconds kept). ``args`` may hold Futures (a broadcast model).

    Returns
    -------
    (object, StepTime)
        The summed partial result, on the host, and where the step's time went.
    """
    began = time.perf_counter()
    parts = [client.submit(task, shard, *args, pure=False) for shard in shards]
    total = tree_reduce(client, parts, combine)
    (partial, seconds), = fetch(client, [total])
    return partial, StepTime(time.perf_counter() - began, float(seconds))


def run_client(pipeline: str):
    """The run's client: Dask's configured scheduler (the runner sets it), or the default.

    Raises
    ------
    DaskGPUError
        Where there is no cluster: ``pipeline`` keeps its shards on a cluster's workers.
    """
    import dask.config

    scheduler = dask.config.get("scheduler", None)
    if hasattr(scheduler, "submit"):
        return scheduler
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        raise DaskGPUError(f"{pipeline} keeps its data on a cluster's workers: start one "
                           "first (daskgpu.cluster())") from None


def wait_kept(client, futures: list) -> None:
    """Wait until ``futures``, data kept on the workers, are done; a failed one raises here.

    Through the run's own waiting where the runner gave ``client``
    (:class:`daskgpu.execution.faults.WatchedClient`: workers gone or paused for good end the run in
    one line, not a wait without end), else as each finishes on ``client``'s own event loop.
    """
    if hasattr(client, "wait"):
        client.wait(futures)
        return
    from distributed import as_completed

    # On this client's loop: distributed.wait takes the default client, which a session's
    # client (set_as_default=False) is not, and which may be none at all.
    for _ in as_completed(futures, loop=client.loop):
        pass
    for future in futures:
        if future.status != "finished":
            future.result()  # the worker's exception


def fetch(client, futures: list) -> list:
    """The results of ``futures``, waited for as :func:`wait_kept` waits."""
    if hasattr(client, "results"):
        return client.results(futures)
    return [future.result() for future in futures]


def add_pairs(a: tuple, b: tuple) -> tuple:
    """Combine two ``(partial, seconds)`` pairs: the partials (tuples) summed, the larger seconds.

    >>> add_pairs(((1, 2.0), 0.5), ((3, 4.0), 0.25))
    ((4, 6.0), 0.5)
    """
    (pa, sa), (pb, sb) = a, b
    return tuple(x + y for x, y in zip(pa, pb, strict=True)), max(sa, sb)


def drive_on_cluster(driver: Callable, keys: ShardKeys, *args: Any) -> Any:
    """Run ``driver(client, shards, *args)`` inside a task, with a client of its worker.

    For a run whose computation must be one task of a graph: the task leaves its worker's
    thread pool while it drives the steps (``worker_client`` secedes), so the shard tasks it
    submits can use every thread. ``keys`` name shards persisted by another client, which
    keeps them alive.
    """
    from distributed import Future, worker_client

    with worker_client() as client:
        shards = [Future(key, client) for key in keys.keys]
        try:
            return driver(client, shards, *args)
        finally:
            for shard in shards:
                shard.release()


def rows_per_shard(given, samples: int, backend) -> int:
    """Rows of each shard: as ``--chunks`` gives (``(N,)``), or one per GPU or CPU thread."""
    if given != "auto":
        return min(given[0], samples)
    slots = backend.workers if backend.is_gpu else backend.threads
    return math.ceil(samples / max(1, slots))


def checked_rows_per_shard(given, samples: int, features: int, dtype, backend, *,
                           rows: str = "rows", each: str = "step") -> int:
    """:func:`rows_per_shard`, refusing layouts no cluster can hold, in one line.

    ``rows`` names what a row is ("points"), ``each`` one pass over the shards ("iteration").

    Raises
    ------
    ParameterError
        Features split across shards, more than :data:`MAX_SHARDS` shards, a shard over
        ``MAX_BLOCK_BYTES``.
    """
    if given != "auto":
        if len(given) > 2 or (len(given) == 2 and given[1] < features):
            raise ParameterError(
                f"--chunks {','.join(map(str, given))}: give {rows} per shard (N); a shard "
                f"holds whole {rows} of all {features} features")
        shards = math.ceil(samples / given[0])
        if shards > MAX_SHARDS:
            raise ParameterError(
                f"--chunks {given[0]}: {shards:.3g} shards of {samples} {rows}; at most "
                f"{MAX_SHARDS} (each {each} runs one task per shard): give more {rows} per "
                "shard")
    per_shard = rows_per_shard(given, samples, backend)
    if per_shard * features * np.dtype(dtype).itemsize > MAX_BLOCK_BYTES:
        raise ParameterError(
            f"--samples {samples} x --features {features}: a shard of {per_shard} {rows} is "
            f"over {MAX_BLOCK_BYTES / 2**40:g} TiB; give fewer samples or features")
    return per_shard
