"""Default sizes and size refusals from the selected GPUs' memory.

A default that a GPU cannot hold fails as an out-of-memory task (exit code 3) in the middle of
a run; a size asked for that cannot fit is better refused before anything starts, naming the
size that would. Both are read from the devices the run selected: the default data takes
``daskgpu.gpu.default-memory-fraction`` of their memory, and data held on the workers for a
whole run (shards kept for every step) may take at most ``daskgpu.gpu.held-memory-fraction``
of it.
"""

from __future__ import annotations

from daskgpu import config as daskgpu_config
from daskgpu.errors import ParameterError

__all__ = ["default_rows", "held_rows_limit", "refuse_held_beyond_memory"]


def _smallest_times_count(backend) -> int:
    """Memory the selected GPUs hold evenly split data in: the smallest one's, times their count.

    Data-parallel pipelines give every GPU the same share of the rows, so the smallest GPU
    bounds them all.
    """
    if not (backend.is_gpu and backend.devices):
        return 0
    return min(d.memory_total for d in backend.devices) * len(backend.devices)


def default_rows(backend, row_bytes: int, cpu_default: int, gpu_most: int | None = None) -> int:
    """Rows of a default size: ``cpu_default`` on CPU; on GPUs, a share of their memory.

    Parameters
    ----------
    backend : Backend
        Where the run goes; its devices are the selected GPUs.
    row_bytes : int
        Bytes one row takes on a GPU, all that the run keeps of it.
    cpu_default : int
        The default on CPU workers.
    gpu_most : int, optional
        An upper bound on GPUs (the size a benchmark target names), and the default on GPUs
        whose memory is not known (``cpu_default`` where not given).

    Returns
    -------
    int
        At least 1.
    """
    if not backend.is_gpu:
        return cpu_default
    memory = _smallest_times_count(backend)
    if not memory:  # GPUs whose memory is not known (an external cluster's): their target size
        return gpu_most or cpu_default
    share = float(daskgpu_config.get("gpu.default-memory-fraction"))
    rows = max(1, int(share * memory // row_bytes))
    return min(rows, gpu_most) if gpu_most else rows


def held_rows_limit(backend, row_bytes: int) -> int | None:
    """The most rows the selected GPUs can keep for a whole run; None on CPU workers."""
    memory = _smallest_times_count(backend)
    if not memory:
        return None
    share = float(daskgpu_config.get("gpu.held-memory-fraction"))
    return max(1, int(share * memory // row_bytes))


def refuse_held_beyond_memory(backend, option: str, rows: int, row_bytes: int,
                              what: str, remedy: str | None = None) -> None:
    """Refuse, in one line, more rows than the selected GPUs can keep for the whole run.

    Parameters
    ----------
    backend : Backend
    option : str
        The option that set ``rows`` (``"--samples"``), for the message.
    rows : int
        The rows asked for.
    row_bytes : int
        Bytes one row takes on a GPU.
    what : str
        What is kept, for the message (``"float32 features"``).
    remedy : str, optional
        What would work, for the message; ``{most}`` is the most rows that fit. Default:
        ``give OPTION {most} or fewer, or more GPUs``.

    Raises
    ------
    ParameterError
        Naming the size per GPU, what the GPUs hold, and the most rows that fit.
    """
    most = held_rows_limit(backend, row_bytes)
    if most is None or rows <= most:
        return
    gpus = len(backend.devices)
    per_gpu = rows * row_bytes / gpus / 1e9
    memory = min(d.memory_total for d in backend.devices) / 1e9
    share = float(daskgpu_config.get("gpu.held-memory-fraction"))
    remedy = (remedy or f"give {option} {{most}} or fewer, or more GPUs").format(most=most)
    raise ParameterError(
        f"{option} {rows}: {per_gpu:.3g} GB of {what} per GPU, kept for the whole run, where "
        f"{share:g} of a {memory:.3g} GB GPU's memory is the most that fits; {remedy}")
