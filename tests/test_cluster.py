"""The multi-worker tests' cluster on localhost: ports the kernel hands nobody else, and a failed worker's peers
killed at once instead of waiting for it until the timeout."""

import random
import socket
import sys
import time
import unittest

from tests.cluster import cluster_ports, ephemeral_start, run_workers

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
FAILING = [sys.executable, "-c", "import sys; print('out'); sys.exit('the worker could not start its server')"]
PASSING = [sys.executable, "-c", "print('trained')"]


class ClusterPortsTest(unittest.TestCase):
    def test_distinct_free_ports_below_the_ephemeral_range(self):
        ports = cluster_ports(4, random.Random(0))
        self.assertEqual(len(set(ports)), 4)
        self.assertTrue(all(1024 <= port < ephemeral_start() for port in ports), ports)
        for port in ports:
            with socket.socket() as probe:
                probe.bind(("0.0.0.0", port))

    def test_processes_that_seeded_random_alike_draw_different_ports(self):
        state = random.getstate()
        self.addCleanup(random.setstate, state)
        random.seed(0)
        first = cluster_ports(2)
        random.seed(0)
        self.assertNotEqual(cluster_ports(2), first)

    def test_a_port_in_use_is_not_chosen(self):
        taken = cluster_ports(1, random.Random(1))[0]
        with socket.socket() as holder:
            holder.bind(("0.0.0.0", taken))
            holder.listen()
            chosen = cluster_ports(200, random.Random(1))  # the same draws: the first is the port held
        self.assertNotIn(taken, chosen)


class RunWorkersTest(unittest.TestCase):
    def test_all_succeed(self):
        results = run_workers([PASSING, PASSING], [None, None], ".", timeout=60)
        self.assertEqual([(code, out) for code, out, _ in results], [(0, "trained\n")] * 2)

    def test_a_failed_worker_gets_its_peer_killed_at_once(self):
        start = time.monotonic()
        (sleeper, failed) = run_workers([SLEEPER, FAILING], [None, None], ".", timeout=100)
        self.assertLess(time.monotonic() - start, 60)  # not the peer's 120 s, nor the timeout
        self.assertEqual(failed[:2], (1, "out\n"))
        self.assertIn("the worker could not start its server", failed[2])
        self.assertLess(sleeper[0], 0)  # killed by a signal
        self.assertIn("(killed: worker 1 failed)", sleeper[2])

    def test_the_timeout_kills_every_worker_and_says_so(self):
        results = run_workers([SLEEPER, SLEEPER], [None, None], ".", timeout=1)
        for code, _, err in results:
            self.assertLess(code, 0)
            self.assertIn("killed after the 1 s timeout", err)


if __name__ == "__main__":
    unittest.main()
