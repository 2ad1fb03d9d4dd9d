"""The server's life (loading, serving, draining), which requests it takes meanwhile, and how it stops.

    loading   the port is open; GET /healthz answers 503 {"status": "loading"}, GET /v1/models/NAME says
              "LOADING", and requests that need the model get 503 with Retry-After
    ok        GET /healthz answers 200 {"status": "ok"}, the model is "AVAILABLE"
    draining  after SIGTERM or SIGINT: /healthz answers 503 {"status": "draining"}, the model is "UNLOADING";
              new requests get 503 with Retry-After and Connection: close, while the requests already
              accepted get their answers

`DrainingServer` puts that drain in front of uvicorn's own stop. On a signal uvicorn closes its listening
socket at once, waits for open connections up to `timeout_graceful_shutdown`, ends the application's
lifespan, then raises the signal again (a server stopped by SIGTERM exited with status 143). Here the
first signal only starts the drain, and the stop runs in this order:

1. the lifecycle turns "draining" (the signal handler only sets attributes);
2. every 0.1 s (uvicorn's `on_tick`) the server looks whether an accepted request is still unanswered;
   once none is, or `drain_seconds` have passed,
3. `on_drained` runs (the batcher's stop: past the deadline, requests still waiting get 503), and
4. uvicorn's stop follows: the listening socket closes, idle connections close, open ones get what is
   left of the drain's time (at least `MIN_CLOSE_SECONDS`), the lifespan ends, and the process exits 0.

A second signal ends the drain at once (step 3); after it a SIGINT skips uvicorn's wait, as in uvicorn.
"""

import collections
import contextlib
import logging
import signal
import time

import uvicorn

from t2t_keras.errors import T2TError

logger = logging.getLogger(__name__)

LOADING, SERVING, DRAINING = "loading", "ok", "draining"
MODEL_STATES = {LOADING: "LOADING", SERVING: "AVAILABLE", DRAINING: "UNLOADING"}  # TF Serving's version states
REFUSALS = {
    LOADING: "The model is still loading: send the request again once GET /healthz answers 200.",
    DRAINING: "The server is shutting down: it answers the requests it has accepted and takes no new ones. "
              "Send the request to another replica, or again once this one has restarted.",
}
REFUSAL_RETRY_SECONDS = 1  # Retry-After of a request refused while loading or draining
DEFAULT_DRAIN_SECONDS = 20.0  # inside the 30 s Kubernetes leaves a pod between SIGTERM and SIGKILL
MIN_CLOSE_SECONDS = 1.0  # uvicorn's wait for open connections after the drain, at least


class Lifecycle:
    """Where the server is in its life, and how many accepted requests are still unanswered.

    Attributes:
        status: `LOADING`, `SERVING` or `DRAINING` (the `/healthz` status).
        load_error: the exception that stopped the export from loading, or None.
        in_flight: requests accepted (`accepted()`) and not yet answered.
    """

    def __init__(self):
        self.status = LOADING
        self.load_error = None
        self.in_flight = 0
        self.drain_deadline = None
        self._refused = collections.Counter()

    def loaded(self):
        """The export is loaded and warmed up: requests are taken, unless a drain began meanwhile."""
        if self.status == LOADING:
            self.status = SERVING

    def begin_drain(self, seconds):
        """Takes no new requests from now on, and gives the accepted ones `seconds` (only sets attributes, so a
        signal handler may call it)."""
        self.drain_deadline = time.monotonic() + seconds
        self.status = DRAINING

    def refusal(self):
        """None when a request that needs the model is taken now, else the reason to answer 503 (counted)."""
        if self.status == SERVING:
            return None
        self._refused[self.status] += 1
        return REFUSALS[self.status]

    @contextlib.contextmanager
    def accepted(self):
        """Counts a request as accepted while it is being answered."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def drained(self):
        """While draining: every accepted request is answered, or the drain's time is spent."""
        return self.in_flight == 0 or time.monotonic() >= self.drain_deadline

    def stats(self):
        return {"in_flight_requests": self.in_flight, "refused_loading": self._refused[LOADING],
                "refused_draining": self._refused[DRAINING]}


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose first SIGTERM or SIGINT drains before it stops (see the module docstring).

    Args:
        config: a `uvicorn.Config` of the application.
        lifecycle: the application's `Lifecycle`.
        on_drained: `async on_drained()`, run once the drain ends (stops the model's work).
        drain_seconds: how long accepted requests may take to be answered after the signal;
            None: `DEFAULT_DRAIN_SECONDS`.
    """

    def __init__(self, config, lifecycle, on_drained, drain_seconds=None):
        drain_seconds = DEFAULT_DRAIN_SECONDS if drain_seconds is None else drain_seconds
        if drain_seconds < 0:
            raise T2TError(f"drain_seconds must be >= 0 (0: stop once the running batch ends). "
                           f"Received: drain_seconds={drain_seconds}")
        super().__init__(config)
        self.lifecycle = lifecycle
        self.on_drained = on_drained
        self.drain_seconds = drain_seconds
        self._drain_logged = False

    def handle_exit(self, sig, frame):
        # Nothing is added to uvicorn's captured signals: it would raise them again after the stop.
        if self.lifecycle.status != DRAINING:
            self.lifecycle.begin_drain(self.drain_seconds)
        elif self.should_exit and sig == signal.SIGINT:
            self.force_exit = True
        else:
            self.should_exit = True

    async def on_tick(self, counter):
        stop = await super().on_tick(counter)  # True once should_exit is set
        if self.lifecycle.load_error is not None:
            return True
        if self.lifecycle.status != DRAINING:
            return stop
        if not self._drain_logged:
            self._drain_logged = True
            logger.info("Draining: %d accepted requests to answer, within %g s; new requests get 503.",
                        self.lifecycle.in_flight, self.drain_seconds)
        if not (stop or self.lifecycle.drained()):
            return False
        unanswered = self.lifecycle.in_flight
        await self.on_drained()
        self.config.timeout_graceful_shutdown = max(MIN_CLOSE_SECONDS, self.lifecycle.drain_deadline - time.monotonic())
        logger.info("Drained (%d requests were still unanswered and got 503); stopping.", unanswered)
        return True
