"""Timing on a quiet machine, shared by the benchmark scripts.

    result = measure_quietly(lambda: decode(source), repeats=5, quiet_wait=600, max_other=0.25, retries=2)
    result["median_s"], result["first_s"], result["other_cores"], result["value"]

A measurement waits until other processes use few cores, makes one untimed
call (its time is `first_s`: compilation, tracing), then times `repeats`
calls, and records how many cores other processes used meanwhile; when that
exceeds `max_other` it is measured again, up to `retries` times.
"""

import os
import platform
import statistics
import subprocess
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


def measure(call, repeats):
    """First-call seconds, median seconds of `repeats` calls, other processes' cores, and the first value."""
    start = time.perf_counter()
    value = call()
    first = time.perf_counter() - start
    times, machine, own, wall = [], busy_cores_seconds(), time.process_time(), time.perf_counter()
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    wall = time.perf_counter() - wall
    other = max(0.0, (busy_cores_seconds() - machine) - (time.process_time() - own)) / wall
    return {"first_s": first, "median_s": statistics.median(times), "other_cores": other, "value": value}


def measure_quietly(call, repeats, quiet_wait=600.0, max_other=0.25, retries=2):
    """`measure` on a quiet machine, measured again (up to `retries` times) if disturbed."""
    first = None
    for _ in range(retries + 1):
        wait_for_quiet(max_wait=quiet_wait)
        result = measure(call, repeats)
        first = first or result["first_s"]  # the first attempt's first call includes compilation
        if result["other_cores"] <= max_other:
            break
    return dict(result, first_s=first)


def add_arguments(parser, quiet_wait=600.0, max_other=0.25):
    """The `--quiet-wait`, `--max-other` and `--retries` options of `measure_quietly`."""
    parser.add_argument("--quiet-wait", type=float, default=quiet_wait, help="max seconds to wait for a quiet machine")
    parser.add_argument("--max-other", type=float, default=max_other,
                        help="measure again if other processes used more cores than this")
    parser.add_argument("--retries", type=int, default=2, help="extra attempts for a disturbed measurement")


def machine_description(versions):
    """The CPU (`lscpu`) and `versions` (e.g. "TensorFlow 2.21.0, Keras 3.15.1"), as markdown."""
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:20]
    return "\n".join(["```", *lscpu, "```", "",
                      f"Python {platform.python_version()}, {versions}, {os.cpu_count()} cores; "
                      "TF threads: default (intra/inter-op 0 = all cores)."])


def table_report(title, prose, header, rows, versions):
    """A markdown report: `title`, a paragraph saying how it was measured, a table (`header`: its first two lines,
    `rows`: formatted lines) and the machine with `versions`."""
    return "\n".join([title, "", prose, "", header, *rows, "", machine_description(versions), ""])


def publish(text, output=None):
    """Prints a markdown report and, with `output`, writes it there too."""
    if output:
        with open(output, "w", encoding="utf-8") as handle:
            handle.write(text)
    print(text)
