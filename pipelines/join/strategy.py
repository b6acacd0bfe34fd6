"""How join-pipeline joins: broadcast the right table, or hash-shuffle both tables, by size.

A broadcast join keeps the right table in one partition and merges it with every left partition
where that partition lives: nothing of the left table moves, but each worker holds a copy of the
right table and each merge builds a hash table of it again. A shuffle join moves every row of
both tables once, by key hash, and merges matching pieces.

``auto`` broadcasts when both hold:

* the right table fits a worker comfortably: its copy, plus the working memory of one merge per
  worker thread, stays under the worker's spill threshold (Dask's
  ``distributed.worker.memory.target`` of the smallest worker's memory limit, or of a GPU's
  memory);
* building the right table's hash table as often as the broadcast does (once per worker where
  the workers' merges share it, once per left partition where each merge builds its own) costs
  less than shuffling both tables (:data:`SHUFFLE_ROW_COST`).

Otherwise it shuffles with tasks, which measured faster than p2p here (see the README) and is
the method dask-cudf takes; Dask's ``dataframe.shuffle.method``, where set, is used instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import dask

# Peak working memory of one pandas merge, in bytes of the right table it hashes: measured with
# tracemalloc for a 1 M-row left partition and right tables of 1 M to 10 M rows (1.8x to 3.5x).
MERGE_MEMORY_FACTOR = 4
# One row through a tasks shuffle (hash, split, send, concatenate) costs about as much as this
# many rows inserted into a merge's hash table: 450 ns against 60 ns per row, measured here on
# 2 single-thread workers at 10 M x 1 M rows.
SHUFFLE_ROW_COST = 7
METHODS = ("tasks", "p2p")


@dataclass(frozen=True)
class Strategy:
    """A join strategy and why it was chosen.

    Attributes
    ----------
    broadcast : bool
        Broadcast the right table (one partition) instead of shuffling both.
    method : str or None
        The shuffle method when shuffling (``tasks``, ``p2p`` or Dask's configured one).
    reason : str
        One line saying what decided it.
    """

    broadcast: bool
    method: str | None
    reason: str

    @property
    def name(self) -> str:
        """``broadcast`` or ``hash shuffle (METHOD)``."""
        return "broadcast" if self.broadcast else f"hash shuffle ({self.method})"


@dataclass(frozen=True)
class WorkerMemory:
    """The smallest worker's memory for a join and how many merges it runs at once."""

    limit: int  # bytes
    threads: int
    source: str  # where the limit comes from, for the reason line


def _spill_fraction() -> float:
    """The fraction of a worker's memory it may fill before spilling (Dask's own thresholds)."""
    import distributed  # noqa: F401  (its defaults enter dask.config when it is imported)

    for name in ("target", "spill", "pause"):
        value = dask.config.get(f"distributed.worker.memory.{name}", False)
        if value:
            return float(value)
    return 1.0


def worker_memory(backend, client=None) -> WorkerMemory:
    """The smallest worker memory limit (a GPU's memory on GPU workers) and threads per worker.

    ``client`` (default: Dask's current scheduler, when it is a distributed client) is asked
    for its workers' limits; without one, the host's memory is split between
    ``backend.workers`` as Dask's ``memory_limit="auto"`` does.
    """
    threads = max(1, backend.threads // max(1, backend.workers))
    if backend.is_gpu and backend.devices:
        memory = min(d.memory_total for d in backend.devices)
        return WorkerMemory(memory, 1, "smallest GPU")
    client = client if client is not None else _current_client()
    if client is not None:
        from daskgpu.toolkit.backends import scheduler_workers

        workers = scheduler_workers(client).values()
        limits = [w.get("memory_limit") or 0 for w in workers]
        if limits and min(limits) > 0:
            slots = max(w.get("nthreads", 1) for w in workers)
            return WorkerMemory(min(limits), slots, "smallest worker memory limit")
    from distributed.system import MEMORY_LIMIT

    return WorkerMemory(MEMORY_LIMIT // max(1, backend.workers), threads,
                        "host memory per worker")


def _current_client():
    scheduler = dask.config.get("scheduler", None)
    return scheduler if hasattr(scheduler, "scheduler_info") else None


def default_method(backend) -> str:
    """Dask's configured shuffle method if set, else ``tasks`` (faster here; dask-cudf's)."""
    return dask.config.get("dataframe.shuffle.method", None) or "tasks"


def _size(nbytes: float) -> str:
    return f"{nbytes / 1e9:.3g} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.3g} MB"


def choose(backend, *, left_rows: int, right_rows: int, left_partitions: int, row_bytes: int,
           broadcast: str = "auto", shuffle: str = "auto",
           memory: WorkerMemory | None = None, builds: int | None = None) -> Strategy:
    """The join strategy for these tables on these workers.

    Parameters
    ----------
    backend : Backend
    left_rows, right_rows, left_partitions : int
        Sizes of the tables (the right one is the smaller).
    row_bytes : int
        Bytes per right-table row.
    broadcast : {"auto", "true", "false"}
        ``true`` or ``false`` overrides the choice.
    shuffle : {"auto", "tasks", "p2p"}
        A method forces a shuffle join with it.
    memory : WorkerMemory, optional
        The smallest worker's memory (default: :func:`worker_memory`).
    builds : int, optional
        How often a broadcast join builds the right table's hash table (default: once per
        left partition).
    """
    method = shuffle if shuffle in METHODS else default_method(backend)
    if broadcast == "true":
        return Strategy(True, None, "asked for (--broadcast true)")
    if broadcast == "false":
        return Strategy(False, method, "asked for (--broadcast false)")
    if shuffle in METHODS:
        return Strategy(False, method, f"asked for (--shuffle {shuffle})")
    memory = memory or worker_memory(backend)
    right_bytes = right_rows * row_bytes
    needed = right_bytes * (1 + MERGE_MEMORY_FACTOR * memory.threads)
    room = _spill_fraction() * memory.limit
    fits = (f"right table {_size(right_bytes)}: a copy and {memory.threads} merge(s) per worker "
            f"need {_size(needed)} of the {_size(room)} below spilling ({memory.source})")
    if needed > room:
        return Strategy(False, method, fits.replace(" of the ", ", more than the "))
    builds = left_partitions if builds is None else builds
    hashing = f"hashing it {builds} time(s)"
    if builds * right_rows > SHUFFLE_ROW_COST * (left_rows + right_rows):
        return Strategy(False, method, f"{fits}, but {hashing} costs more than shuffling both "
                        "tables")
    return Strategy(True, None, f"{fits}; {hashing} costs less than shuffling both tables")
