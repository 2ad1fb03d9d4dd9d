"""Which requests the queue takes, which it refuses, and when a refused one should come back.

The queue is bounded in seconds of work: it holds at most as many sentences as the server translates in
`max_queue_seconds`, at the throughput measured on its recent batches (`max_queue`, in sentences, overrides it).

Under sustained overload a bound alone is not fair. Room opens when a batch ends, and the clients whose
requests that batch answered send their next ones at that very moment, while a refused client comes back
after its Retry-After and finds the queue full again: some requests were refused 30 times in a row. So a
refused request keeps a place in a line, as at a counter that hands out numbers:

* it is told to come back (Retry-After) once the work ahead of it, queued and in the line, has drained to
  where it fits, at the measured throughput, plus jitter, so that the clients refused together come back
  spread out rather than all at once;
* a new request goes behind the whole line: it is refused while the places in the line and the work queued
  leave it no room, whether their clients are back yet or not (that room is theirs when they come);
* a client back at its place is admitted if the places ahead of it whose clients are due back by now leave it
  room. A place whose client was told to come back later (it was refused again) blocks nobody meanwhile, so
  the places due together do not keep refusing each other while their clients are away; refused again, a
  client keeps its place, not the last one, and is told the drain time of the work ahead of it anew;
* a retry is known by what it sends again: the same client address, path and body (`request_key`). An honest
  client comes back no sooner than told, so a request is the client of the place of its key whose time came
  most recently. Clients behind one address may send the same body at once (short sentences): one that comes
  at another's time takes that place first, and the place's own client, back a moment later (up to twice the
  mean lateness of the clients, `SAME_BODY_SECONDS` at most), shares the place's turn rather than going to the
  end of the line;
* a place not claimed `GRACE_SECONDS` after the time its client was told is given up (the client went away).

Not every client comes back: many give up or send something else. The places count for the share of the
recent ones that were claimed (`claimed`), so a crowd that never retries does not make the line hold room
for nobody, nor stretch the Retry-After of those who do retry. Up to a batch is queued for anyone who comes:
the server never idles while refusing. So the most retries an honest client needs stays small: once to get a
place, once or twice more when its turn came before the room (Retry-After is whole seconds).
`tests/serving_simulation.py` runs crowds of 1,000 clients against this on a virtual clock.

Deadlines: a request may wait queued until its deadline (`deadline_seconds` after its arrival, or sooner if
it says so in a `grpc-timeout` or `x-envoy-expected-rq-timeout-ms` header, as gRPC and Envoy send it). One
whose wait behind the work queued, as predicted, would run past its deadline is refused at once; the batcher
answers one whose deadline passes while it is queued with 503 before it is translated.
"""

import bisect
import collections
import dataclasses
import hashlib
import heapq
import math
import random
import re
import time

from t2t_keras.errors import T2TError

DEFAULT_QUEUE_SECONDS = 2.0  # about two full batches of `mini` on 2 cores (bench/results/serving_load.md)
DEFAULT_DEADLINE_SECONDS = 30.0  # the longest a request waits queued, unless it asks for less
QUEUED_BATCHES = 4  # the bound, in full batches, until a batch has been measured
MIN_QUEUED_BATCHES = 2  # the bound at least: one batch running, the next one filling
RECENT_WEIGHT = 0.2  # weight of the newest batch in the running throughput
GRACE_SECONDS = 2.0  # how long a refused request's place waits past the time its client was told to come back
CLAIM_WEIGHT = 0.05  # weight of the newest place in the running share of places claimed (not given up)
SAME_BODY_SECONDS = 1.0  # a place taken is taken again by the next request with its key at most this long after its
LATENESS_WEIGHT = 0.05  # time (twice the mean lateness of the clients, `lateness`); weight of the newest in that mean
MAX_RETRY_AFTER_SECONDS = 10.0  # told at most: a longer line is waited in several turns (see `retry_after`)
JITTER_SHARE = 0.1  # Retry-After is drawn from wait * [1 - this, 1 + this], then rounded at random (see retry_after)
MAX_PLACES = 100_000  # refused requests kept in the line at most (about 10 MB); past it they get no place
OVERLOADED, DEADLINE = "overloaded", "deadline"  # causes of a refusal
TIMEOUT_HEADERS = ("grpc-timeout", "x-envoy-expected-rq-timeout-ms")
GRPC_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


class Overloaded(Exception):
    """Refused before translation; `retry_after`: whole seconds until it should come back; `cause`: why."""

    cause = OVERLOADED

    def __init__(self, message, retry_after):
        super().__init__(message)
        self.retry_after = retry_after


class DeadlineExceeded(Overloaded):
    """The request's deadline passed, or would pass, before its translation starts."""

    cause = DEADLINE


@dataclasses.dataclass
class Arrival:
    """One request on its way through the queue.

    Attributes:
        key: what identifies its retries (`request_key`), or None: a refused request without a key gets no place.
        deadline: `time.monotonic()` after which it is not translated, or None.
        queued_seconds: set once its batch starts: how long it waited.
    """

    key: bytes = None
    deadline: float = None
    queued_seconds: float = None


@dataclasses.dataclass
class _Place:
    key: bytes  # of the request that holds it
    sentences: int
    turn: int  # its order in the line: the number of the first place of its turn
    back: float  # when its client was last told to come back
    expires: float  # when the place is given up if unclaimed (or forgotten, if taken)
    taken: bool = False  # its client came back and was admitted
    shared_until: float = -math.inf  # till then a request with its key and no place of its own shares its turn


def request_key(*parts):
    """The key of a request from what its retries send again (e.g. client address, path, body): 16 bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        data = part.encode() if isinstance(part, str) else bytes(part)
        digest.update(len(data).to_bytes(8, "little") + data)
    return digest.digest()


def deadline_from_headers(headers, default_seconds, now=None):
    """`time.monotonic()` deadline of a request: its timeout header's, or `default_seconds`, whichever is sooner.

    Raises `T2TError` for a header that is not a timeout.
    """
    now = time.monotonic() if now is None else now
    seconds = [default_seconds] if default_seconds is not None else []
    value = headers.get("grpc-timeout")
    if value is not None:
        match = re.fullmatch(r"\s*(\d{1,8})([HMSmun])\s*", value)
        if match is None:
            raise T2TError(f"grpc-timeout {value!r} is not a timeout: send up to 8 digits and a unit, H, M, S, m "
                           "(ms), u or n, e.g. grpc-timeout: 500m.")
        seconds.append(int(match.group(1)) * GRPC_UNITS[match.group(2)])
    value = headers.get("x-envoy-expected-rq-timeout-ms")
    if value is not None:
        if not value.strip().isdigit():
            raise T2TError(f"x-envoy-expected-rq-timeout-ms {value!r} is not a timeout: send whole milliseconds, "
                           "e.g. x-envoy-expected-rq-timeout-ms: 500.")
        seconds.append(int(value) / 1000.0)
    return now + min(seconds) if seconds else None


class Throughput:
    """Sentences a second of the recent batches: running means of their sentences and of their times."""

    def __init__(self):
        self._sentences = self._seconds = None

    def add(self, sentences, seconds):
        if self._seconds is None:
            self._sentences, self._seconds = float(sentences), float(seconds)
        else:
            self._sentences += RECENT_WEIGHT * (sentences - self._sentences)
            self._seconds += RECENT_WEIGHT * (seconds - self._seconds)

    @property
    def per_second(self):
        """None until a batch has been measured."""
        if self._seconds is None:
            return None
        return self._sentences / max(self._seconds, 1e-6)


class Admission:
    """The queue's bound, the line of refused requests, and Retry-After (see the module docstring).

    Args:
        max_batch_size: sentences per batch (the bound is at least `MIN_QUEUED_BATCHES` batches).
        max_queue: most sentences held at once; None: as many as `max_queue_seconds` of work.
        max_queue_seconds: seconds of work the queue holds; None: `DEFAULT_QUEUE_SECONDS`.
        deadline_seconds: the longest a request may wait queued, unless it asks for less;
            None: `DEFAULT_DEADLINE_SECONDS`.
        rng: a `random.Random` for the jitter (tests pass a seeded one).
    """

    def __init__(self, max_batch_size, max_queue=None, max_queue_seconds=None, deadline_seconds=None, rng=None):
        max_queue_seconds = DEFAULT_QUEUE_SECONDS if max_queue_seconds is None else max_queue_seconds
        deadline_seconds = DEFAULT_DEADLINE_SECONDS if deadline_seconds is None else deadline_seconds
        if (max_queue is not None and max_queue < 1) or not max_queue_seconds > 0 or not deadline_seconds > 0:
            raise T2TError("max_queue (sentences) must be >= 1, max_queue_seconds and deadline_seconds > 0. "
                           f"Received: max_queue={max_queue}, max_queue_seconds={max_queue_seconds}, "
                           f"deadline_seconds={deadline_seconds}")
        self.max_batch_size = max_batch_size
        self.max_queue = max_queue
        self.max_queue_seconds = max_queue_seconds
        self.deadline_seconds = deadline_seconds
        self.throughput = Throughput()
        self.held = 0  # sentences accepted and not yet answered
        self.counts = collections.Counter()
        self.claimed = 1.0  # running share of the places whose clients came back for them
        self.lateness = SAME_BODY_SECONDS / 2  # running mean of how late after their time clients came back (s)
        self._line = {}  # number -> _Place
        self._order = []  # (turn, number) of every place, sorted: the line's order
        self._numbers = collections.defaultdict(list)  # key -> the numbers of its places
        self._next_number = 0
        self._waiting = self._waiting_sentences = 0  # places in the line not taken, and their sentences
        self._expiries = []  # heap of (expires, number) for every time a place was given one; some are stale
        self._rng = rng or random.Random()

    def limit(self):
        """The most sentences held at once, now."""
        if self.max_queue is not None:
            return self.max_queue
        rate = self.throughput.per_second
        if rate is None:
            return QUEUED_BATCHES * self.max_batch_size
        return max(MIN_QUEUED_BATCHES * self.max_batch_size, math.ceil(rate * self.max_queue_seconds))

    def arrival(self, key=None, headers=None, now=None):
        """The `Arrival` of a request with `key`, its deadline from its `headers` (or the default); raises `T2TError`
        for a malformed timeout header."""
        return Arrival(key, deadline_from_headers(headers or {}, self.deadline_seconds, now))

    def admit(self, num_sentences, arrival=None, now=None):
        """Counts `num_sentences` as held, or raises `Overloaded` (or `DeadlineExceeded`) with a Retry-After."""
        now = time.monotonic() if now is None else now
        arrival = arrival or Arrival()
        self._give_up_places(now)
        number = self._place_of(arrival.key, now)
        due, ahead = self._ahead(number, now)
        limit = self.limit()
        first = ahead if number is None else due  # a new request goes behind the whole line
        fits = self.held == 0 or (self.held + num_sentences <= limit and (
            self.held + first + num_sentences <= limit or self.held + num_sentences <= self.max_batch_size))
        late = arrival.deadline is not None and now + self._start_wait() > arrival.deadline
        if fits and not late:
            if number is not None:
                self._take(number, now)
            self.held += num_sentences
            return
        # Back once the work ahead has drained to where it fits with a batch to spare: room opens a batch at a time.
        wait = self.drain_seconds(self.held + ahead + num_sentences - limit + self.max_batch_size)
        retry_after = self._keep_place(number, arrival.key, num_sentences, now, wait)
        self._refused(num_sentences, late)
        if late:
            raise DeadlineExceeded(f"The request would wait past its deadline: {self.held} sentences are waiting or "
                                   f"being translated ahead of it. Send it again in {retry_after} s, or with a "
                                   "longer timeout.", retry_after)
        raise Overloaded(f"The server is busy: {self.held} sentences are waiting or being translated, and it holds "
                         f"at most {limit} ({self._bound_name()}); {self._waiting} refused requests wait their "
                         f"turn: send the request again in {retry_after} s.", retry_after)

    def release(self, num_sentences):
        self.held -= num_sentences

    def measured(self, num_sentences, seconds):
        """A batch of `num_sentences` took `seconds`."""
        self.throughput.add(num_sentences, seconds)

    def drain_seconds(self, num_sentences):
        """Seconds to translate `num_sentences` at the measured throughput (None before the first batch)."""
        rate = self.throughput.per_second
        return None if rate is None else max(0.0, num_sentences) / rate

    def retry_after(self, wait_seconds):
        """Whole seconds (at least 1) to come back after `wait_seconds` (None: 1 s), with jitter.

        The wait is drawn from `wait * [1 - JITTER_SHARE, 1 + JITTER_SHARE]` and rounded down or up at random, in
        proportion to its fraction (2.3 s: 2 s seven times in ten, 3 s three times). So clients refused together
        come back spread out, and on average on time: the queue, which held `max_queue_seconds` of work when they
        were told, keeps the model busy until they come.

        A wait longer than `MAX_RETRY_AFTER_SECONDS` is told in turns of that length (the request keeps its place
        meanwhile): a line of clients who will not come back (whose places count less only once they are given
        up) then holds the others back for seconds, not minutes.
        """
        wait = 1.0 if wait_seconds is None else min(wait_seconds, MAX_RETRY_AFTER_SECONDS)
        wait *= self._rng.uniform(1 - JITTER_SHARE, 1 + JITTER_SHARE)
        return max(1, math.floor(wait + self._rng.random()))

    def line_length(self, now=None):
        """Refused requests that keep a place; with `now`, those given up by then left out."""
        if now is not None:
            self._give_up_places(now)
        return self._waiting

    def stats(self, now=None):
        """Counters and gauges at `now` (default: the present)."""
        now = time.monotonic() if now is None else now
        return dict(self.counts, queued_sentences=self.held, max_queue=self.limit(),
                    waiting_their_turn=self.line_length(now), places_claimed=round(self.claimed, 3),
                    sentences_per_second=_rounded(self.throughput.per_second))

    def _start_wait(self):
        """Predicted seconds until a request queued now starts (0 if unknown): the work queued ahead of it."""
        return self.drain_seconds(self.held - self.max_batch_size) or 0.0

    def _place_of(self, key, now):
        """The number of the place a request with `key` comes back to now, or None (a new request).

        An honest client comes back when it was told, not sooner, and a moment later: the request is the client of
        the place of its key whose client was told to come back most recently before now. Failing that, it shares
        the turn of a place of its key whose time came less than `_shared_seconds()` ago, and which was taken or
        told to come back later since: another client sending the same body (from the same address) came first at
        that time, and is not told apart from the place's client. A turn is shared once.
        """
        found = shared = None
        for number in self._numbers.get(key, ()):
            place = self._line[number]
            if not place.taken and place.back <= now < place.expires:
                if found is None or place.back > self._line[found].back:
                    found = number
            elif now < place.shared_until and shared is None:
                shared = number
        if found is not None or shared is None:
            return found
        place = self._line[shared]
        place.shared_until = -math.inf
        if place.taken:
            return shared
        return self._new_place(key, place.sentences, place.turn)

    def _ahead(self, number, now):
        """Sentences of the places before place `number` whose clients are due back by `now` and not yet back, and
        of all the places before it not taken (for a request without a place: None, and the whole line's); each
        counted for the share of places claimed.

        A place whose client was told to come back later blocks nobody meanwhile: those behind it that are back go
        on, and it goes before them again once it is due.
        """
        if number is None:
            return None, self._waiting_sentences * self.claimed
        due = ahead = 0
        for _, place_number in self._order:
            if place_number == number:
                break
            place = self._line[place_number]
            if not place.taken:
                ahead += place.sentences
                due += place.sentences if place.back <= now else 0
        return due * self.claimed, ahead * self.claimed

    def _keep_place(self, number, key, num_sentences, now, wait):
        """Retry-After of a refused request, which keeps its place or takes the last one."""
        retry_after = self.retry_after(wait)
        if number is None:
            if key is None or len(self._line) >= MAX_PLACES:
                return retry_after
            number = self._new_place(key, num_sentences)
        place = self._line[number]
        if place.taken:
            self._count_waiting(place, 1)
        elif place.back <= now:  # refused at its time: shared with a client sending the same body, for a moment
            place.shared_until = place.back + self._shared_seconds()
        place.taken, place.back, place.expires = False, now + retry_after, now + retry_after + GRACE_SECONDS
        heapq.heappush(self._expiries, (place.expires, number))
        return retry_after

    def _new_place(self, key, sentences, turn=None):
        """The number of a new place, taken (its client is deciding), last in the line or at `turn`."""
        number, self._next_number = self._next_number, self._next_number + 1
        place = self._line[number] = _Place(key, sentences, number if turn is None else turn, 0.0, 0.0, True)
        self._numbers[key].append(number)
        bisect.insort(self._order, (place.turn, number))
        return number

    def _take(self, number, now):
        """The client of place `number` is admitted. The place stays, taken, a moment past its time (see
        `_place_of`); taken twice, it is gone."""
        place = self._line[number]
        if place.taken:
            self._remove(number)
            return
        self._count_waiting(place, -1)
        self.lateness += LATENESS_WEIGHT * (now - place.back - self.lateness)
        place.taken, place.expires = True, place.back + self._shared_seconds()
        place.shared_until = place.expires
        heapq.heappush(self._expiries, (place.expires, number))
        self._claim(1.0)

    def _shared_seconds(self):
        """How long after a place's time another request with its key shares its turn: twice the mean lateness of
        the clients coming back, `SAME_BODY_SECONDS` at most."""
        return min(SAME_BODY_SECONDS, 2 * self.lateness)

    def _count_waiting(self, place, sign):
        self._waiting += sign
        self._waiting_sentences += sign * place.sentences

    def _refused(self, num_sentences, late):
        self.counts["rejected_requests"] += 1
        self.counts["rejected_sentences"] += num_sentences
        if late:
            self.counts["rejected_deadline"] += 1

    def _remove(self, number):
        place = self._line.pop(number)
        del self._order[bisect.bisect_left(self._order, (place.turn, number))]
        numbers = self._numbers[place.key]
        numbers.remove(number)
        if not numbers:
            del self._numbers[place.key]

    def _claim(self, claimed):
        self.claimed += CLAIM_WEIGHT * (claimed - self.claimed)

    def _give_up_places(self, now):
        """Drops the places not claimed in time (their clients went away), and the taken ones past their time."""
        while self._expiries and self._expiries[0][0] <= now:
            expires, number = heapq.heappop(self._expiries)
            place = self._line.get(number)
            if place is None or place.expires != expires:
                continue  # gone, or given a later time since
            if not place.taken:
                self._count_waiting(place, -1)
                self._claim(0.0)
                self.counts["places_given_up"] += 1
            self._remove(number)

    def _bound_name(self):
        if self.max_queue is not None:
            return "max_queue"
        rate = self.throughput.per_second
        measured = "before any batch was measured" if rate is None else f"at {rate:.1f} sentences/s"
        return f"max_queue_seconds={self.max_queue_seconds:g} {measured}"


def _rounded(value):
    return None if value is None else round(value, 2)
