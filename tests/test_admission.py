"""Admission to the queue: its bound in seconds of work, Retry-After from the drain time, the line of refused
requests, deadlines. Times are passed in (`now`), so no clock decides an outcome."""

import math
import random
import unittest

from t2t_keras.errors import T2TError
from t2t_keras.serving.admission import (
    GRACE_SECONDS,
    JITTER_SHARE,
    MAX_RETRY_AFTER_SECONDS,
    Admission,
    Arrival,
    DeadlineExceeded,
    Overloaded,
    deadline_from_headers,
)


def measured_admission(rate, **options):
    """An `Admission` that has measured `rate` sentences a second, with a seeded jitter."""
    options.setdefault("rng", random.Random(0))
    admission = Admission(**options)
    admission.measured(rate, 1.0)
    return admission


def refusal(admission, num_sentences, arrival=None, now=0.0):
    with unittest.TestCase().assertRaises(Overloaded) as caught:
        admission.admit(num_sentences, arrival, now)
    return caught.exception


class BoundTest(unittest.TestCase):
    def test_the_queue_holds_the_work_the_measured_throughput_does_in_max_queue_seconds(self):
        admission = Admission(8, max_queue_seconds=2.0)
        self.assertEqual(admission.limit(), 32)  # four batches until a batch is measured
        admission.measured(40, 1.0)
        self.assertEqual(admission.limit(), 80)
        admission.measured(40, 10.0)  # slower; the newest batch weighs 0.2: 40 sentences in 1 + 0.2 * 9 s
        self.assertEqual(admission.limit(), 29)  # ceil(2 s * 40 / 2.8 s)
        slow = Admission(8, max_queue_seconds=2.0)
        slow.measured(4, 1.0)
        self.assertEqual(slow.limit(), 16)  # at least two batches: one running, one filling
        self.assertEqual(Admission(8, max_queue=5).limit(), 5)

    def test_rejects_bad_settings_naming_them(self):
        for options, name in (({"max_queue": 0}, "max_queue=0"), ({"max_queue_seconds": 0}, "max_queue_seconds=0"),
                              ({"deadline_seconds": -1}, "deadline_seconds=-1")):
            with self.assertRaisesRegex(T2TError, name):
                Admission(8, **options)


class RetryAfterTest(unittest.TestCase):
    def test_retry_after_is_the_drain_time_of_the_work_ahead_with_jitter(self):
        admission = measured_admission(1.0, max_batch_size=1, max_queue=10)  # one sentence a second
        admission.admit(10, now=0.0)
        told = [refusal(admission, 5, Arrival(key=bytes([i]))).retry_after for i in range(20)]
        for position, seconds in enumerate(told):
            drain = min(5 * (position + 1) + 1, MAX_RETRY_AFTER_SECONDS)  # five sentences for each request ahead
            self.assertGreaterEqual(seconds, math.floor(drain * (1 - JITTER_SHARE)))
            self.assertLessEqual(seconds, math.floor(drain * (1 + JITTER_SHARE)) + 1)
        self.assertEqual(admission.line_length(), 20)

    def test_jitter_spreads_clients_refused_in_the_same_state_and_keeps_them_on_time(self):
        told = [refusal(_full(seed), 1).retry_after for seed in range(200)]  # each told after a 6 s drain
        self.assertGreater(len(set(told)), 2)
        self.assertAlmostEqual(sum(told) / len(told), 6.0, delta=0.2)

    def test_before_any_batch_is_measured_retry_after_is_about_a_second(self):
        admission = Admission(1, max_queue=1, rng=random.Random(0))
        admission.admit(1, now=0.0)
        self.assertIn(refusal(admission, 1).retry_after, (1, 2))


def _full(seed):
    """Five sentences held, the bound one, one sentence a second (a request of one is back after the four past
    the bound, its own and a batch of one have drained: 6 s); jitter seeded by `seed`."""
    admission = Admission(1, max_queue=1, rng=random.Random(seed))
    admission.measured(1, 1.0)
    admission.admit(5, now=0.0)
    return admission


class LineTest(unittest.TestCase):
    def setUp(self):
        self.admission = measured_admission(1.0, max_batch_size=1, max_queue=4)
        self.admission.admit(4, now=0.0)
        self.first = Arrival(key=b"first")
        self.told = refusal(self.admission, 2, self.first, now=0.0).retry_after
        self.admission.release(2)  # two sentences answered: room for two

    def test_a_newer_request_waits_behind_a_place_not_yet_due(self):
        refusal(self.admission, 2, Arrival(key=b"newer"), now=self.told - 0.5)  # the room is kept for "first"
        self.admission.admit(2, self.first, now=self.told)
        self.assertEqual((self.admission.held, self.admission.line_length()), (4, 1))

    def test_a_due_place_is_served_before_newer_requests(self):
        refusal(self.admission, 2, Arrival(key=b"newer"), now=self.told)
        self.admission.admit(2, self.first, now=self.told)  # its retry: first in line
        self.assertEqual((self.admission.held, self.admission.line_length()), (4, 1))  # "newer" waits its turn

    def test_a_due_place_refused_again_keeps_its_priority(self):
        admission = measured_admission(1.0, max_batch_size=1, max_queue=4)
        admission.admit(4, now=0.0)
        told = refusal(admission, 2, self.first, now=0.0).retry_after
        again = refusal(admission, 2, self.first, now=told)  # nothing answered yet: refused at its time
        admission.release(2)
        later = refusal(admission, 2, Arrival(key=b"later"), now=told + again.retry_after)
        self.assertGreaterEqual(later.retry_after, 1)  # "later" is told to come back: the due place goes first
        admission.admit(2, self.first, now=told + again.retry_after)  # raises Overloaded if refused
        self.assertEqual((admission.held, admission.line_length()), (4, 1))

    def test_a_place_whose_client_was_sent_away_again_blocks_nobody_meanwhile(self):
        admission = measured_admission(1.0, max_batch_size=1, max_queue=4)
        admission.admit(4, now=0.0)
        second = Arrival(key=b"second")
        told = refusal(admission, 2, self.first, now=0.0).retry_after
        second_told = refusal(admission, 2, second, now=0.0).retry_after  # behind "first"
        first_back = told + refusal(admission, 2, self.first, now=told).retry_after  # nothing answered yet
        admission.release(2)
        self.assertLess(second_told, first_back)  # "first" is away when "second" comes
        admission.admit(2, second, now=second_told)  # raises Overloaded if "first" held it back
        self.assertEqual(admission.held, 4)

    def test_another_client_sending_the_same_body_first_does_not_cost_the_place_its_turn(self):
        refusal(self.admission, 4, Arrival(key=b"newer"), now=0.0)  # four sentences, behind "first"
        self.admission.admit(2, Arrival(key=b"first"), now=self.told)  # the same body as "first", at its time
        again = refusal(self.admission, 2, self.first, now=self.told + 0.1)  # its client, a moment later
        # Still ahead of "newer": back once the work held past the bound, its own and a batch have drained (3 s),
        # not "newer"'s four sentences too (7 s).
        self.assertLessEqual(again.retry_after, math.floor(3 * (1 + JITTER_SHARE)) + 1)

    def test_a_place_not_claimed_in_time_is_given_up(self):
        refusal(self.admission, 2, Arrival(key=b"newer"), now=self.told)
        self.admission.admit(2, Arrival(key=b"newer"), now=self.told + GRACE_SECONDS + 1)
        self.assertEqual(self.admission.stats(now=self.told + GRACE_SECONDS + 1)["places_given_up"], 1)

    def test_a_request_without_a_key_gets_no_place(self):
        refusal(self.admission, 2, Arrival(), now=self.told)
        self.assertEqual(self.admission.line_length(), 1)


class AbandonedPlacesTest(unittest.TestCase):
    def test_places_whose_clients_never_come_back_count_less_and_less(self):
        admission = measured_admission(1.0, max_batch_size=1, max_queue=4)
        admission.admit(4, now=0.0)
        told_everyone = [refusal(admission, 2, Arrival(key=bytes([i])), now=0.0).retry_after for i in range(40)]
        self.assertGreaterEqual(min(told_everyone[5:]), 9)  # 10 s at most: a long line is waited in turns
        refusal(admission, 2, Arrival(key=b"late"), now=1000.0)  # long after every place was given up
        self.assertEqual(admission.stats(now=1000.0)["places_given_up"], 40)  # none came back
        self.assertLess(admission.claimed, 0.2)
        for i in range(10):
            refusal(admission, 2, Arrival(key=b"next %d" % i), now=1000.0)
        self.assertLess(refusal(admission, 2, Arrival(key=b"last"), now=1000.0).retry_after, 9)  # not 25 s (10)

    def test_up_to_a_batch_is_queued_for_anyone_who_comes(self):
        admission = measured_admission(1.0, max_batch_size=4, max_queue=8)
        admission.admit(8, now=0.0)
        told = refusal(admission, 6, Arrival(key=b"a"), now=0.0).retry_after
        admission.release(7)  # 1 sentence queued and "a" due with 6: no room for 2 more, but the model needs work
        admission.admit(2, Arrival(key=b"b"), now=told)
        self.assertEqual(admission.held, 3)  # "b" queued although "a" is due: the batch is not full
        refused = refusal(admission, 2, Arrival(key=b"c"), now=told)  # past a batch: "a" goes first
        self.assertGreaterEqual(refused.retry_after, 1)
        admission.release(1)
        admission.admit(6, Arrival(key=b"a"), now=told)
        self.assertEqual(admission.held, 8)


class DeadlineTest(unittest.TestCase):
    def test_a_request_that_would_wait_past_its_deadline_is_refused_at_once(self):
        admission = measured_admission(1.0, max_batch_size=1, max_queue=100)
        admission.admit(5, now=0.0)
        error = refusal(admission, 1, Arrival(key=b"a", deadline=1.0), now=0.0)
        self.assertIsInstance(error, DeadlineExceeded)
        self.assertEqual(error.cause, "deadline")
        self.assertRegex(str(error), "past its deadline")
        admission.admit(1, Arrival(key=b"b", deadline=10.0), now=0.0)  # starts within 10 s

    def test_the_deadline_is_the_sooner_of_the_default_and_the_request_s_header(self):
        self.assertEqual(deadline_from_headers({}, 30.0, now=100.0), 130.0)
        self.assertEqual(deadline_from_headers({"grpc-timeout": "500m"}, 30.0, now=100.0), 100.5)
        self.assertEqual(deadline_from_headers({"grpc-timeout": "2M"}, 30.0, now=100.0), 130.0)
        self.assertEqual(deadline_from_headers({"x-envoy-expected-rq-timeout-ms": "250"}, 30.0, now=100.0), 100.25)
        self.assertIsNone(deadline_from_headers({}, None, now=100.0))

    def test_a_malformed_timeout_header_is_an_error_naming_it(self):
        with self.assertRaisesRegex(T2TError, "grpc-timeout '1.5s' is not a timeout.*e.g. grpc-timeout: 500m"):
            deadline_from_headers({"grpc-timeout": "1.5s"}, 30.0)
        with self.assertRaisesRegex(T2TError, "x-envoy-expected-rq-timeout-ms 'soon'"):
            deadline_from_headers({"x-envoy-expected-rq-timeout-ms": "soon"}, 30.0)


if __name__ == "__main__":
    unittest.main()
