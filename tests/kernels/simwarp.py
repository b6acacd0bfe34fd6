"""The warp intrinsics daskgpu's kernels use, for Numba's CUDA simulator (which lacks them).

``install()`` adds ``shfl_down_sync`` and ``match_any_sync`` to the simulator's ``cuda`` module,
with the semantics numba-cuda documents for a full warp: each of the 32 lanes of a warp (the
simulator's threads ``32w .. 32w + 31`` of a block) posts its value and waits for the others,
then reads. Only the full mask is accepted, and a block's thread count must be a multiple of 32:
a kernel that calls them from a diverged or partial warp fails here instead of hanging on a GPU.
``calls`` counts the calls, so that a test can tell the intrinsics were used.
"""

from __future__ import annotations

import collections
import threading

FULL_MASK = 0xFFFFFFFF
WAIT_S = 120
calls: collections.Counter = collections.Counter()
_lock = threading.Lock()
_warps: dict = {}


def _exchange(mask, value):
    """Post ``value`` for this lane; return every lane's value (in lane order) and this lane."""
    if int(mask) != FULL_MASK:
        raise AssertionError(f"warp intrinsic with mask {int(mask):#x}: only full warps here")
    thread = threading.current_thread()
    block = thread._manager._block_dim
    if (block[0] * block[1] * block[2]) % 32:
        raise AssertionError(f"warp intrinsic in a block of {block}: not whole warps")
    lane, warp = thread.thread_id % 32, thread.thread_id // 32
    key = (id(thread._manager), tuple(thread.blockIdx), warp)
    with _lock:
        if key not in _warps:
            _warps[key] = (threading.Barrier(32, timeout=WAIT_S), [None] * 32)
        barrier, slots = _warps[key]
    slots[lane] = value
    barrier.wait()
    seen = list(slots)
    barrier.wait()  # nobody posts the next value before every lane has read this one
    return seen, lane


def shfl_down_sync(self, mask, value, delta):
    """The value of lane ``lane + delta``; this lane's own where that is past the warp."""
    calls["shfl_down_sync"] += 1
    seen, lane = _exchange(mask, value)
    return seen[lane + delta] if lane + delta < 32 else value


def match_any_sync(self, mask, value):
    """The bit mask of the lanes whose ``value`` equals this lane's."""
    calls["match_any_sync"] += 1
    seen, _ = _exchange(mask, value)
    return sum(1 << lane for lane, other in enumerate(seen) if other == value)


def install() -> None:
    """Give the simulator's ``cuda`` module the two intrinsics (call before a kernel runs)."""
    from numba.cuda.simulator import kernelapi

    kernelapi.FakeCUDAModule.shfl_down_sync = shfl_down_sync
    kernelapi.FakeCUDAModule.match_any_sync = match_any_sync
