"""A small HTTP/1.1 load generator on asyncio streams, for bench_serving_load.py.

    client = LoadClient("127.0.0.1", 8501)
    outcomes = await closed_loop(client, requests, concurrency=200)          # each worker: send, wait, send
    outcomes = await closed_loop(client, requests, 200, max_attempts=30)     # ... a 503 again after its Retry-After
    outcomes = await open_loop(client, make_request, rate=400, seconds=15)   # arrivals on a clock

A `Request` is a kind (e.g. "valid", "bad json"), a path and a body; an `Outcome` names what came back:
an HTTP status ("200", "503", ...), or `REFUSED` (the connection was refused: nothing was sent), `NO_ANSWER`
(the connection closed or reset after the request was sent) or `TIMEOUT`. Connections are kept alive and
reused, unless the server answers `Connection: close`; one idle longer than `MAX_IDLE_SECONDS` is closed
rather than reused, since uvicorn closes idle connections after 5 s. A request sent on a reused connection
that the server had closed all the same (nothing came back) is sent again once on a new connection, as HTTP
clients do, and counted in `LoadClient.retried`. An honest client (`send_retrying`) sends a request refused
with 503 again after the Retry-After it names, the same body, until it is answered otherwise or has been
refused `max_attempts` times; its outcome counts from the first attempt and says how many retries it took.
Raw streams rather than httpx: the client shares the two cores with the server, and httpx costs several times
the CPU per request.
"""

import asyncio
import itertools
import json
import time
import typing

REFUSED, NO_ANSWER, TIMEOUT = "refused", "no answer", "timeout"
MAX_IDLE_SECONDS = 4.0  # below uvicorn's keep-alive timeout (5 s)


class Request(typing.NamedTuple):
    kind: str
    path: str
    body: bytes  # sent with POST; b"" with GET


class Outcome(typing.NamedTuple):
    kind: str
    status: str  # "200", "400", "503", ..., REFUSED, NO_ANSWER or TIMEOUT
    seconds: float  # from the request's start (open loop: its planned arrival) to the end of its answer
    error: str  # the JSON answer's "error", or ""
    started: float  # time.monotonic() at the start
    retry_after: int = None  # a 503's Retry-After (seconds)
    retries: int = 0  # how many times it was sent again after a 503 (`send_retrying`)


class _NoAnswer(Exception):
    def __init__(self, received):
        super().__init__("the connection closed before a whole answer")
        self.received = received  # bytes of the answer read before it closed


class _Connection:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.idle_since = time.monotonic()

    async def exchange(self, head, body):
        """Sends one request; returns `(status, headers, body)` of its answer."""
        self.writer.write(head + body)
        await self.writer.drain()
        line = await self.reader.readline()
        if not line:
            raise _NoAnswer(0)
        status, headers = int(line.split()[1]), {}
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        try:
            data = await self.reader.readexactly(int(headers.get("content-length", 0)))
        except asyncio.IncompleteReadError as error:
            raise _NoAnswer(len(error.partial) + 1) from None
        return status, headers, data

    def close(self):
        self.writer.close()


class LoadClient:
    """Sends requests to one server over a pool of keep-alive connections; see the module docstring."""

    def __init__(self, host, port, timeout=60.0):
        self.host, self.port, self.timeout = host, port, timeout
        self._idle = []
        self.retried = 0

    async def send(self, request, started=None):
        """The `Outcome` of `request`; `started`: when it counts from (default: now)."""
        started = time.monotonic() if started is None else started
        for attempt in range(2):
            connection = self._idle_connection() if attempt == 0 else None
            reused = connection is not None
            try:
                connection = connection or _Connection(*await asyncio.open_connection(self.host, self.port))
            except OSError as error:  # refused, or no port left to connect from
                return Outcome(request.kind, REFUSED, time.monotonic() - started, str(error), started)
            status = await self._exchange(connection, request)
            if status == (NO_ANSWER, 0, None) and reused:
                self.retried += 1  # closed while idle, before this request reached it
                continue
            break
        code, text, retry_after = status
        return Outcome(request.kind, str(code), time.monotonic() - started, text if code != NO_ANSWER else "",
                       started, retry_after)

    async def send_retrying(self, request, max_attempts):
        """The `Outcome` of `request` sent again after each 503's Retry-After, `max_attempts` times at most; its
        time counts from the first attempt."""
        started = time.monotonic()
        for retries in range(max_attempts):
            outcome = await self.send(request, started)
            if outcome.status != "503" or retries == max_attempts - 1:
                break
            await asyncio.sleep(outcome.retry_after or 1)
        return outcome._replace(retries=retries)

    def _idle_connection(self):
        """The most recently used idle connection, or None; those idle too long are closed."""
        while self._idle:
            connection = self._idle.pop()
            if time.monotonic() - connection.idle_since < MAX_IDLE_SECONDS:
                return connection
            connection.close()
        return None

    async def _exchange(self, connection, request):
        """`(status, error text, Retry-After or None)`, or `(NO_ANSWER, bytes received, None)` / `(TIMEOUT, "",
        None)`; keeps the connection if it may be reused."""
        method = "POST" if request.body else "GET"
        head = (f"{method} {request.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(request.body)}\r\n\r\n").encode()
        try:
            code, headers, data = await asyncio.wait_for(connection.exchange(head, request.body), self.timeout)
        except asyncio.TimeoutError:
            connection.close()
            return TIMEOUT, "", None
        except _NoAnswer as error:
            connection.close()
            return NO_ANSWER, error.received, None
        except ConnectionError:
            connection.close()
            return NO_ANSWER, 1, None
        if headers.get("connection", "").lower() == "close":
            connection.close()
        else:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        retry_after = headers.get("retry-after", "")
        return code, _error_text(data), int(retry_after) if retry_after.isdigit() else None

    def close(self):
        for connection in self._idle:
            connection.close()
        self._idle.clear()


def _error_text(data):
    try:
        answer = json.loads(data)
    except ValueError:
        return ""
    return answer.get("error", "") if isinstance(answer, dict) else ""


async def closed_loop(client, requests, concurrency, stop=None, on_outcome=None, max_attempts=None):
    """Sends `requests` (an iterable, possibly endless) from `concurrency` workers, each waiting for its answer
    before its next request, until the requests run out or `stop()` is true; returns the outcomes in order of
    completion. `on_outcome(outcomes)` is called after each one. `max_attempts`: each worker is an honest client
    that sends a refused request again after its Retry-After (`LoadClient.send_retrying`)."""
    outcomes, source = [], iter(requests)
    stop = stop or (lambda: False)

    async def worker():
        for request in source:
            if stop():
                return
            if max_attempts is None:
                outcomes.append(await client.send(request))
            else:
                outcomes.append(await client.send_retrying(request, max_attempts))
            if on_outcome is not None:
                on_outcome(outcomes)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


async def open_loop(client, make_request, rate, seconds):
    """Requests arriving at `rate` a second for `seconds`, each sent at its arrival whatever is still unanswered;
    latency counts from the planned arrival. Returns the outcomes and how late the latest start was (seconds)."""
    loop, outcomes, tasks, lateness = asyncio.get_running_loop(), [], [], 0.0
    begin = loop.time()
    for index in itertools.count():
        planned = begin + index / rate
        if planned - begin >= seconds:
            break
        await asyncio.sleep(max(0.0, planned - loop.time()))
        lateness = max(lateness, loop.time() - planned)
        tasks.append(asyncio.ensure_future(client.send(make_request(index), planned)))  # loop.time() is monotonic
    for task in tasks:
        outcomes.append(await task)
    return outcomes, lateness
