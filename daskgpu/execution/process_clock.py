"""How long this process has been running: what a command-line run reports as its phases."""

from __future__ import annotations

import os
import time


def seconds_since_start() -> float:
    """Seconds since this process started, to the clock tick where Linux says.

    psutil's ``create_time`` adds the boot time, which Linux gives in whole seconds: up to a
    second off, in either direction. Elsewhere psutil's is what there is.
    """
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        import psutil

        return max(0.0, time.time() - psutil.Process().create_time())
