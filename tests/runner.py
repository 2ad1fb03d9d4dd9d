"""Runs the unittest suite and ends with one `N passed, N failed, N skipped` line.

    python -m tests.runner                      # discover everything under tests/
    python -m tests.runner tests.test_model     # named modules
    python -m tests.runner --workers 1          # one process (default: one more than the CPU cores, at most 4)
    python -m tests.runner --record-durations   # also rewrite tests/durations.json (durations-long.json) from this run
    python -m tests.runner --profile DIR        # also DIR/<module>.prof (cProfile) and DIR/seconds.json per test
    python -m tests.runner --long               # the long checks instead (`bash bench/checks/run`)

Before the first module starts, a process of its own builds the tiny run and exports that the suite's road tests
share (`tests.roads`, when a module given imports it), into a directory named in `T2T_TEST_ROADS` for the
workers and removed at the end.

A test class or test marked `tests.helpers.long_check` (what trains, exports or serves for minutes on 2 cores)
is a long check: left out of the suite, counted on the line before the final one, and run with `--long`, with
the modules under bench/checks/.

Test modules run in parallel worker processes (one more than the CPU cores: a module that waits on a process
it started, a server or the disk leaves its core to another), longest first (by `tests/durations.json`; a
module not listed there counts as average), and each module's output is printed in one piece when it ends,
with the worker's resident memory after it. A worker that dies is reported with the module it was running and
the signal that ended it (again before the final line); that module runs once more in a fresh worker, and fails
if its worker dies again. A crash in native code can come from what earlier modules left in a long-lived
worker: the module's own run in a fresh process is what counts. A worker grown past its share of the machine's
memory is replaced between modules.
Before the final line the runner lists the slowest test classes and tests (set-up included), to keep the
suite's time in view, and then each test that failed with the end of its traceback, so that the last screen of
a long log (what CI shows) names what failed.
"""

import argparse
import collections
import dataclasses
import gc
import io
import json
import multiprocessing.connection
import os
import pathlib
import resource
import sys
import time
import traceback
import unittest

SLOWEST = 20
FAILURE_LINES = 8  # the end of each failed test's traceback repeated before the final line
MAX_WORKERS = 4
DURATIONS = pathlib.Path(__file__).with_name("durations.json")
LONG_DURATIONS = pathlib.Path(__file__).with_name("durations-long.json")  # the long checks' own times


class TimedResult(unittest.TextTestResult):
    """A text result that also adds up the seconds spent in each test and test class, class set-up included."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = collections.Counter()
        self.test_seconds = collections.Counter()
        self._last = time.monotonic()

    def stopTest(self, test):
        """Charges the time since the previous test ended, so a class's set-up counts with its first test."""
        super().stopTest(test)
        seconds = time.monotonic() - self._last
        self.seconds[type(test).__module__ + "." + type(test).__qualname__] += seconds
        self.test_seconds[test.id()] += seconds
        self._last = time.monotonic()


@dataclasses.dataclass
class ModuleReport:
    """What one test module's run left: its printed output, counts and time per test class."""

    name: str
    output: str
    run: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    class_seconds: dict = dataclasses.field(default_factory=dict)
    test_seconds: dict = dataclasses.field(default_factory=dict)
    resident_bytes: int = 0  # the worker's resident memory after the module
    left_out: int = 0  # tests of the other kind (long checks in the suite, suite tests with --long)
    failures: list = dataclasses.field(default_factory=list)  # (test id, its traceback's last lines) per failure


def traceback_end(text, lines=FAILURE_LINES):
    """The last `lines` non-empty lines of a traceback (or of any message), indented for the failure list."""
    kept = [line for line in text.rstrip().splitlines() if line.strip()][-lines:]
    return "".join(f"    {line}\n" for line in kept)


def is_long_check(test):
    """Whether `test` (a TestCase instance) or its class is marked `tests.helpers.long_check`."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return bool(getattr(type(test), "long_check", False) or getattr(method, "long_check", False))


def flatten(suite):
    """The TestCase instances of a (nested) unittest suite, in order."""
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from flatten(item)
        else:
            yield item


def select(suite, long):
    """The tests of `suite` that are long checks (`long`) or not, as one suite, and how many were left out. A
    module that failed to import is kept either way: its error must show."""
    kept, left_out = [], 0
    for test in flatten(suite):
        if type(test).__name__ == "_FailedTest" or is_long_check(test) == long:
            kept.append(test)
        else:
            left_out += 1
    return unittest.TestSuite(kept), left_out


def run_tests(name, stream, long=False):
    """Runs the tests `name` (a module, class or test, dotted) that are long checks (`long`) or not, and writes
    unittest's verbose output to `stream`."""
    suite, left_out = select(unittest.TestLoader().loadTestsFromName(name), long)
    result = unittest.TextTestRunner(verbosity=2, stream=stream, resultclass=TimedResult).run(suite)
    failures = [(test.id(), traceback_end(text)) for test, text in result.errors + result.failures]
    failures += [(test.id(), "    passed, but is marked expectedFailure\n") for test in result.unexpectedSuccesses]
    return (result.testsRun, len(failures), len(result.skipped), dict(result.seconds), dict(result.test_seconds),
            left_out, failures)


def cpu_seconds():
    """CPU seconds used so far by this process and the child processes it has waited for."""
    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def run_module(name, profile_dir=None, long=False):
    """Runs one module in this (worker) process; never raises, an import error counts as a failure.

    `profile_dir`: the run is profiled (cProfile) into `profile_dir/<name>.prof`; `long`: its long checks."""
    stream = io.StringIO()
    start, cpu_start = time.monotonic(), cpu_seconds()
    profile = None
    if profile_dir:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    try:
        run, failed, skipped, class_seconds, test_seconds, left_out, failures = run_tests(name, stream, long)
    except Exception:  # noqa: BLE001 - reported as the module's failure
        stream.write(traceback.format_exc())
        run, failed, skipped, class_seconds, test_seconds, left_out = 0, 1, 0, {}, {}, 0
        failures = [(name, traceback_end(traceback.format_exc()))]
    if profile is not None:
        profile.disable()
        profile.dump_stats(str(pathlib.Path(profile_dir) / f"{name}.prof"))
    settle_garbage()
    return ModuleReport(name, stream.getvalue(), run, failed, skipped, time.monotonic() - start,
                        cpu_seconds() - cpu_start, class_seconds, test_seconds, left_out=left_out,
                        failures=failures)


def collect_rarely():
    """Collects garbage less often than Python's default (700, 10, 10) while a module runs; `settle_garbage`
    collects after it. The objects alive so far (the interpreter's, the imports') are frozen first."""
    gc.set_threshold(10_000, 20, 20)
    gc.freeze()


def settle_garbage():
    """Frees this module's garbage, then exempts what survives from later collections (`gc.freeze`).

    Tracing TensorFlow functions allocates millions of Python objects, so the collector runs often, and every full
    collection walks all of the hundreds of thousands of objects that TensorFlow, Keras and the earlier modules
    left alive: a large share of a tracing-heavy test's time. The runner collects rarely while a module runs
    (`collect_rarely`) and once after it."""
    gc.collect()
    gc.freeze()


def discover_modules(long=False):
    """The dotted names of the test modules under tests/ (and with `long` under bench/checks/), as `unittest`
    discovery would find them."""
    here = pathlib.Path(__file__).parent
    names = [f"tests.{path.stem}" for path in here.glob("test*.py")]
    if long:
        names += [f"bench.checks.{path.stem}" for path in (here.parent / "bench" / "checks").glob("test*.py")]
    return sorted(names)


def load_durations(path=DURATIONS):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def longest_first(names, durations):
    """`names` ordered by their recorded seconds, longest first; an unrecorded one counts as the average."""
    known = [durations[n] for n in names if n in durations]
    default = sum(known) / len(known) if known else 0.0
    return sorted(names, key=lambda n: -durations.get(n, default))


def uses_roads(names):
    """Whether a module of `names` (dotted, possibly of a class or test) reads the shared roads (`tests.roads`)."""
    here = pathlib.Path(__file__).parent.parent
    for name in names:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            path = here.joinpath(*parts[:end]).with_suffix(".py")
            if path.is_file():
                if "from tests.roads import" in path.read_text(encoding="utf-8"):
                    return True
                break
    return False


class RoadsBuild:
    """The build of the shared roads (`python -m tests.roads DIR`) in a process of its own, started at once; the
    workers wait for it on the cache's lock only when a test needs it. `T2T_TEST_ROADS` names its directory."""

    def __init__(self):
        import subprocess
        import tempfile

        self.directory = tempfile.mkdtemp(prefix="t2t-test-roads-")
        os.environ["T2T_TEST_ROADS"] = self.directory
        self.log = open(pathlib.Path(self.directory) / "build.log", "w+")
        self.process = subprocess.Popen([sys.executable, "-m", "tests.roads", self.directory], stdout=self.log,
                                        stderr=subprocess.STDOUT, cwd=pathlib.Path(__file__).parent.parent,
                                        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})

    def close(self):
        """Waits for the build, prints its end if it failed (the tests that needed it failed too), removes it."""
        import shutil

        if self.process.wait() != 0:
            self.log.seek(0)
            print("building the shared roads (tests.roads) failed:\n" + "".join(self.log.readlines()[-30:]))
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)
        os.environ.pop("T2T_TEST_ROADS", None)


def _initialize_worker(threads):
    """Before TensorFlow loads: quiet logs, and `threads` compute threads for this worker and the processes its
    tests start, so that the workers share the cores instead of each spreading over all of them."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(threads))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))  # CTranslate2's threads
    collect_rarely()


def resident_bytes():
    """This process's resident memory now, in bytes (0 where /proc is missing)."""
    try:
        return int(pathlib.Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def worker_loop(connection, threads, profile_dir, long):
    """A worker process: runs each module name it receives and sends back its report and its resident memory."""
    _initialize_worker(threads)
    while True:
        name = connection.recv()
        if name is None:
            return
        connection.send((run_module(name, profile_dir, long), resident_bytes()))


def recycle_bytes(workers):
    """A worker whose resident memory has grown past this after a module is replaced by a fresh one: what the
    modules leave alive (TensorFlow's caches, frozen objects) adds up, and `workers` of them, with the processes
    and servers their tests start, must fit in the machine's memory."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        total = 16 << 30
    return max(2 << 30, total // (2 * workers))


def death_message(name, exitcode, seconds=None, again=False, earlier=()):
    """What to print for module `name`, whose worker process ended with `exitcode` (negative: killed by a signal)
    `seconds` after it was given the module; `again`: the module runs again in a fresh worker; `earlier`: the
    modules the worker ran before it, whose leftovers may be the cause."""
    if exitcode is not None and exitcode < 0:
        import signal

        how = f"was killed by {signal.Signals(-exitcode).name}"
        if exitcode == -signal.SIGKILL:
            how += " (on Linux most often the kernel's out-of-memory killer: see `dmesg`)"
    else:
        how = f"exited with code {exitcode}"
    when = f" {seconds:.0f} s into it" if seconds is not None else ""
    then = "it runs again in a fresh worker" if again else "the other modules went on in fresh workers"
    before = f" The worker had run {', '.join(earlier)} before it." if earlier else ""
    return f"{name}: the worker process running it {how}{when}; {then}.{before}\n"


class Worker:
    """One spawned worker process (a fresh interpreter: no TensorFlow state is forked) and the module it runs."""

    def __init__(self, context, threads, profile_dir, long):
        self.connection, child = context.Pipe()
        self.process = context.Process(target=worker_loop, args=(child, threads, profile_dir, long), daemon=True)
        self.process.start()
        child.close()
        self.module, self.earlier = None, []

    def give(self, name):
        if self.module is not None:
            self.earlier.append(self.module)
        self.module, self.given_at = name, time.monotonic()
        self.connection.send(name)

    def stop(self):
        try:
            self.connection.send(None)
        except OSError:
            pass
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def run_parallel(names, workers, on_report, on_death, profile_dir=None, long=False):
    """Runs `names` in `workers` processes; a worker grown past `recycle_bytes` is replaced.

    A worker that dies (a crash in native code can come from what earlier modules left in the process) is
    reported to `on_death` with its module, which runs once more in a fresh worker; a module whose worker dies
    twice fails, named with the signal that ended it."""
    pending = collections.deque(names)
    context = multiprocessing.get_context("spawn")
    threads = max(1, (os.cpu_count() or 1) // workers)
    limit = recycle_bytes(workers)
    died = set()
    pool = [Worker(context, threads, profile_dir, long) for _ in range(min(workers, len(pending)))]
    for worker in pool:
        worker.give(pending.popleft())
    while pool:
        ready = multiprocessing.connection.wait([w.connection for w in pool] + [w.process.sentinel for w in pool])
        for worker in list(pool):
            if worker.connection not in ready and worker.process.sentinel not in ready:
                continue
            pool.remove(worker)
            try:
                report, resident = worker.connection.recv()
            except (EOFError, OSError):  # the worker died: its module runs again, or fails; a fresh worker goes on
                worker.process.join()
                name, again = worker.module, worker.module not in died
                message = death_message(name, worker.process.exitcode, time.monotonic() - worker.given_at, again,
                                        worker.earlier)
                if again:
                    died.add(name)
                    on_death(message)
                    pending.appendleft(name)
                else:
                    on_report(ModuleReport(name, message, failed=1, failures=[(name, traceback_end(message))]))
                worker = None
            else:
                report.resident_bytes = resident
                on_report(report)
                if resident >= limit or not pending:
                    worker.stop()
                    worker = None
            if pending:
                worker = worker or Worker(context, threads, profile_dir, long)
                pool.append(worker)
                worker.give(pending.popleft())


def memory(report):
    """`, worker 1.2 GB` for a report that knows its worker's resident memory, else ''."""
    return f", worker {report.resident_bytes / 1e9:.1f} GB" if report.resident_bytes else ""


def default_workers():
    """One more than the CPU cores, at most `MAX_WORKERS`. A module often waits (on a process it started, a
    server, the disk): on 2 cores, two workers kept the cores 82% busy (2,597 CPU seconds in 1,589 s), three 95%
    (2,110 in 1,108 s, with the garbage collection of `settle_garbage`)."""
    return max(1, min(MAX_WORKERS, (os.cpu_count() or 1) + 1))


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m tests.runner")
    parser.add_argument("names", nargs="*", help="test modules (or classes, or tests) to run; default: all")
    parser.add_argument("--workers", type=int, default=int(os.environ.get("T2T_TEST_WORKERS", 0)) or
                        default_workers(), help="parallel processes (env T2T_TEST_WORKERS)")
    parser.add_argument("--record-durations", action="store_true",
                        help="rewrite tests/durations.json (with --long: durations-long.json)")
    parser.add_argument("--long", action="store_true", help="run the long checks (tests marked "
                        "`tests.helpers.long_check`, and bench/checks/) instead of the suite")
    parser.add_argument("--profile", metavar="DIR", help="profile each module into DIR/<module>.prof, and write "
                        "every test's seconds to DIR/seconds.json")
    args = parser.parse_args(argv)
    if args.profile:
        pathlib.Path(args.profile).mkdir(parents=True, exist_ok=True)
    names = args.names or discover_modules(args.long)
    durations_path = LONG_DURATIONS if args.long else DURATIONS
    durations = load_durations(durations_path)
    start = time.time()
    reports = []

    def on_report(report):
        reports.append(report)
        if args.long and report.run == 0 and report.failed == 0:
            return  # a module without long checks
        sys.stdout.write(f"===== {report.name}: {report.run} run, {report.failed} failed, {report.skipped} skipped "
                         f"in {report.seconds:.0f} s (CPU {report.cpu_seconds:.0f} s{memory(report)}) =====\n"
                         f"{report.output}")
        sys.stdout.flush()

    deaths = []

    def on_death(message):
        deaths.append(message)
        sys.stdout.write(f"===== worker death: {message}")
        sys.stdout.flush()

    workers = min(args.workers, len(names))
    print(f"running {len(names)} test module(s) in {workers} process(es)", flush=True)
    roads = RoadsBuild() if not args.long and "T2T_TEST_ROADS" not in os.environ and uses_roads(names) else None
    try:
        if workers <= 1:
            collect_rarely()
            for name in names:
                on_report(run_module(name, args.profile, args.long))
        else:
            run_parallel(longest_first(names, durations), workers, on_report, on_death, args.profile, args.long)
    finally:
        if roads is not None:
            roads.close()
    failed = sum(r.failed for r in reports)
    skipped = sum(r.skipped for r in reports)
    # Per module: a failed setUpClass, or a worker's death, is a failure but no test run.
    passed = sum(max(r.run - r.failed - r.skipped, 0) for r in reports)
    class_seconds, test_seconds = collections.Counter(), collections.Counter()
    for report in reports:
        class_seconds.update(report.class_seconds)
        test_seconds.update(report.test_seconds)
    for kind, seconds in (("test classes", class_seconds), ("tests", test_seconds)):
        print(f"slowest {kind}: " + ", ".join(f"{name} {s:.0f} s" for name, s in seconds.most_common(SLOWEST)))
    left_out = sum(r.left_out for r in reports)
    if left_out and not args.long:
        print(f"{left_out} long checks left out (they run with `bash bench/checks/run`)")
    if args.record_durations:
        durations.update({r.name: round(r.seconds, 1) for r in reports})
        durations_path.write_text(json.dumps(dict(sorted(durations.items())), indent=1) + "\n")
    if args.profile:
        seconds = {"modules": {r.name: round(r.seconds, 1) for r in reports},
                   "classes": {n: round(s, 1) for n, s in class_seconds.most_common()},
                   "tests": {n: round(s, 1) for n, s in test_seconds.most_common()}}
        (pathlib.Path(args.profile) / "seconds.json").write_text(json.dumps(seconds, indent=1) + "\n")
    for message in deaths:  # the module's own line above says how it did in its fresh worker
        print(f"worker death: {message}", end="")
    for report in reports:
        for test_id, end in report.failures:
            print(f"FAILED {test_id}\n{end}", end="")
    print(f"ran in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
