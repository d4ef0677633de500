"""Retries during an outage, told in a few lines instead of one per retry.

A server that goes away with 64 reads in flight makes every one of them retry with backoff:
hundreds of lines in seconds, which bury a terminal's progress bar and a worker's log. An
``OutageLog`` (one per client) says instead, at WARNING: when requests start failing, that
they still fail (at most every ``remind_s``), and when one succeeds again, with how long it
lasted and how many requests were retried (``level``: WARNING unless given). Every single
retry stays in the log at DEBUG.

    outage = OutageLog("http://pod:8001", logger)
    sent_at = outage.now()                                                  # per request
    outage.retrying("server_error", "server error 503: ...", "retry 1/4 in 0.40s")  # it failed
    outage.succeeded(sent_at)                                               # it was answered
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime

from app.engine import redact_url

__all__ = ["REMIND_S", "OutageLog"]

#: While an outage lasts, a reminder at most this often.
REMIND_S = 30.0


class OutageLog:
    """The outage state of one client: when its requests started failing, how many retried."""

    def __init__(self, url: str, logger: logging.Logger, *, what: str = "reads",
                 level: int = logging.WARNING, remind_s: float = REMIND_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = redact_url(url)  #: as the log lines show it
        self.what = what
        self.level = level
        self.remind_s = remind_s
        self._log = logger
        self._clock = clock
        self._since: float | None = None  #: clock time of the first failure (None: no outage)
        self._since_text = ""
        self._retried = 0
        self._next_reminder = 0.0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def retrying(self, kind: str, message: str, retry: str) -> None:
        """A request failed with ``kind``/``message`` and is retried (``retry`` says when)."""
        self._log.debug("%s at %s failed (%s: %s); %s", self.what, self.url, kind, message,
                        retry)
        now = self._clock()
        self._retried += 1
        if self._since is None:
            self._since, self._next_reminder = now, now + self.remind_s
            self._since_text = datetime.now().strftime("%H:%M:%S")
            self._log.log(self.level, "%s at %s failing since %s (%s: %s); retrying with "
                          "backoff", self.what, self.url, self._since_text, kind, message)
        elif now >= self._next_reminder:
            self._next_reminder = now + self.remind_s
            self._log.log(self.level, "%s at %s still failing since %s (%.0fs, %d retried so "
                          "far): %s: %s", self.what, self.url, self._since_text,
                          now - self._since, self._retried, kind, message)

    def now(self) -> float:
        """The time a request is sent, for ``succeeded``."""
        return self._clock()

    def succeeded(self, sent_at: float) -> None:
        """A request sent at ``sent_at`` (``now()``) succeeded: an outage in progress is over,
        unless the request was sent before it began (an answer already on its way)."""
        if self._since is None or sent_at < self._since:
            return
        lasted, retried = self._clock() - self._since, self._retried
        self._since, self._retried = None, 0
        self._log.log(self.level, "%s at %s succeed again at %s, after %.1fs failing (%d "
                      "retried)", self.what, self.url, datetime.now().strftime("%H:%M:%S"),
                      lasted, retried)
