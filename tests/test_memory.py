"""Per-worker peak memory of a run, measured on the workers."""

from __future__ import annotations

import numpy as np

import daskgpu
from daskgpu import memory

BLOCK_BYTES = 64 * 2**20


def test_kernel_high_water_mark_resets_and_rises():
    assert memory._reset_high_water_mark()
    before = memory._high_water_mark()
    block = np.ones(BLOCK_BYTES // 8)
    block[::4096] = 2  # touch every page
    assert memory._high_water_mark() >= before + BLOCK_BYTES * 0.9
    del block
    memory._reset_high_water_mark()
    assert memory._high_water_mark() < before + BLOCK_BYTES * 0.5


def test_run_reports_each_workers_peak_and_it_follows_the_block_size(cpu_client):
    small = daskgpu.run("mean-pipeline", client=cpu_client, size=1000)
    big = daskgpu.run("histogram-pipeline", client=cpu_client, size=2 * BLOCK_BYTES // 8,
                      chunks=str(BLOCK_BYTES // 8), bins=16, range=(0, 1))
    for result in (small, big):
        assert len(result.workers) == 2
        assert all(w["host_peak_bytes"] > 10 * 2**20 for w in result.workers)
        assert all("device_peak_bytes" not in w for w in result.workers)  # CPU workers
    # each worker held at least one 64 MiB block of the histogram's input, none of the mean's
    assert max(w["host_peak_bytes"] for w in big.workers) >= (
        max(w["host_peak_bytes"] for w in small.workers) + 0.9 * BLOCK_BYTES)
