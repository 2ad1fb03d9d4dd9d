"""Runs the unittest suite and ends with one `N passed, N failed, N skipped` line.

    python -m tests.runner                      # discover everything under tests/
    python -m tests.runner tests.test_model     # named modules

Before that line it lists the slowest test classes (set-up included), to keep the suite's time in view.
"""

import collections
import sys
import time
import unittest

SLOWEST = 8


class TimedResult(unittest.TextTestResult):
    """A text result that also adds up the seconds spent in each test class, its class set-up included."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds = collections.Counter()
        self._last = time.monotonic()

    def stopTest(self, test):
        """Charges the time since the previous test ended, so a class's set-up counts with its first test."""
        super().stopTest(test)
        self.seconds[type(test).__module__ + "." + type(test).__qualname__] += time.monotonic() - self._last
        self._last = time.monotonic()


def main(argv):
    loader = unittest.TestLoader()
    if argv:
        suite = loader.loadTestsFromNames(argv)
    else:
        suite = loader.discover("tests", top_level_dir=".")
    start = time.time()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout, resultclass=TimedResult).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = max(result.testsRun - failed - skipped, 0)  # a failed setUpClass is an error but no test
    print("slowest test classes: " + ", ".join(f"{name} {seconds:.0f} s"
                                               for name, seconds in result.seconds.most_common(SLOWEST)))
    print(f"ran in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
