"""Runs the unittest suite and ends with one `N passed, N failed, N skipped` line.

    python -m tests.runner                      # discover everything under tests/
    python -m tests.runner tests.test_model     # named modules
"""

import sys
import time
import unittest


def main(argv):
    loader = unittest.TestLoader()
    if argv:
        suite = loader.loadTestsFromNames(argv)
    else:
        suite = loader.discover("tests", top_level_dir=".")
    start = time.time()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = max(result.testsRun - failed - skipped, 0)  # a failed setUpClass is an error but no test
    print(f"ran in {time.time() - start:.0f} s")
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
