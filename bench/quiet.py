"""Waiting for a quiet machine before timing, shared by the benchmark scripts."""

import os
import time


def busy_cores_seconds():
    """CPU seconds spent by the whole machine (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        user, nice, system, _, _, irq, softirq = (int(x) for x in f.readline().split()[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(threshold=0.25, hold=5.0, max_wait=600.0):
    """Blocks until other processes use < `threshold` cores for `hold` s (or `max_wait` passes)."""
    start = quiet_since = time.time()
    last = busy_cores_seconds()
    while time.time() - start < max_wait:
        time.sleep(1.0)
        now = busy_cores_seconds()
        if now - last >= threshold:
            quiet_since = time.time()
        elif time.time() - quiet_since >= hold:
            return True
        last = now
    return False
