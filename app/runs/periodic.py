"""A thread that calls one job every interval until stopped: the sweeper's and the breaker's
prober in every worker's main process. A failed call is logged and the next one comes on time:
a database that is down is tried again next interval, and recovery never ends on one error."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from app.errors import DreadsError

__all__ = ["PeriodicThread"]


class PeriodicThread(threading.Thread):
    """Calls ``job`` every ``interval_s`` until ``stop()``; ``what`` names the job in the log
    ("sweep failed: ...")."""

    def __init__(self, job: Callable[[], Any], *, interval_s: float, name: str, what: str,
                 log: logging.Logger) -> None:
        super().__init__(name=name, daemon=True)
        self._job = job
        self._interval_s = interval_s
        self._what = what
        self._log = log
        self._stopped = threading.Event()

    def started(self) -> None:
        """Called once in the thread before the first interval (a subclass logs it)."""

    def run(self) -> None:
        self.started()
        while not self._stopped.wait(self._interval_s):
            try:
                self._job()
            except DreadsError as exc:
                self._log.warning("%s failed: %s", self._what, exc.message)
            except Exception:  # keep going: one bad call must not end recovery
                self._log.exception("%s failed", self._what)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopped.set()
        if self.is_alive():
            self.join(timeout_s)
