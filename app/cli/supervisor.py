"""``dreads worker``'s supervisor: the Celery worker is started again, with backoff, for as
long as it keeps dying on its own.

A Celery worker exits when its broker fails under it (a Redis at ``maxmemory`` with
``noeviction`` answers writes with OOM errors; a Redis that is gone): nothing is lost (SQL
keeps the work; leases and the sweeper recover it), but nothing runs until it is started
again. The supervisor waits ``Backoff.delay`` before each restart (doubling from ``first_s``
to ``max_s``; a start that lasted ``healthy_s`` counts as healthy and starts it over),
forever unless ``give_up_s`` is set, and says each change of state in one line on stderr and
in its metrics (``SupervisorState``, served with the pool's by ``app.telemetry.supervisor``).
When the broker refused writes as the worker died (``broker_ok`` False) the wait ends as
soon as it takes them again: a worker takes work within a second or two of Redis having room,
however long the backoff had grown. A stop signal (SIGTERM, SIGINT, SIGQUIT) is passed on and
ends it for good.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from app.telemetry.supervisor import SupervisorState

__all__ = ["Backoff", "supervise"]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
#: How often a backoff wait looks for a stop signal, and asks whether the broker is back.
_TICK_S = 0.2
_ASK_S = 1.0


@dataclass(frozen=True)
class Backoff:
    """When a Celery worker that died is started again (``DREADS_WORKER_BACKOFF_S``,
    ``DREADS_WORKER_BACKOFF_MAX_S``, ``DREADS_WORKER_GIVE_UP_S``)."""

    first_s: float = 1.0
    max_s: float = 60.0
    #: give up once it kept dying this long (no start lasted ``healthy_s``); None: never
    give_up_s: float | None = None
    #: a start that lasted this long was healthy: the next death waits ``first_s`` again
    healthy_s: float = 60.0

    def delay(self, deaths: int) -> float:
        """The wait before the restart after the ``deaths``-th death in a row (1, 2, ...)."""
        return min(self.max_s, self.first_s * 2 ** min(max(0, deaths - 1), 62))


def supervise(command: list[str], *, backoff: Backoff | None = None,
              env: dict[str, str] | None = None, state: SupervisorState | None = None,
              say: Callable[[str], None] | None = None,
              broker_ok: Callable[[], bool | None] | None = None) -> int:
    """Run ``command`` (the Celery worker) until it exits with 0 or after a stop signal;
    start it again after a backoff when it dies on its own (forever, unless
    ``backoff.give_up_s``). ``broker_ok``: whether the broker takes writes now (None:
    unknown); a wait that began with it refusing them ends once it takes them. Returns the
    exit code to exit with."""
    from app.telemetry.supervisor import SupervisorState

    backoff = backoff or Backoff()
    state = state or SupervisorState()
    tell = say or _stderr
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, forward)
    deaths = 0
    failing_since: float | None = None
    while True:
        started = time.monotonic()
        child = subprocess.Popen(command, env=env)
        if state.restarts:
            tell(f"dreads worker: the Celery worker runs again (pid {child.pid}, restart "
                 f"{state.restarts})")
        state.enter("running")
        code = child.wait()
        if stopping.is_set() or code == 0:
            state.enter("stopped")
            return code
        if time.monotonic() - started >= backoff.healthy_s:
            deaths, failing_since = 0, None
        deaths += 1
        failing_since = started if failing_since is None else failing_since
        failing_s = time.monotonic() - failing_since
        if backoff.give_up_s is not None and failing_s >= backoff.give_up_s:
            state.enter("gave_up")
            tell(f"error: the Celery worker kept dying for {failing_s:.0f} s ({deaths} times "
                 f"in a row, last exit {code}); giving up (DREADS_WORKER_GIVE_UP_S="
                 f"{backoff.give_up_s:g}): check the broker (DREADS_BROKER_URL) and the log "
                 "above, then start `dreads worker` again")
            return code
        delay = backoff.delay(deaths)
        state.enter("backoff", backoff_s=delay)
        tell(f"dreads worker: the Celery worker exited with {code} ({deaths} time(s) in a "
             f"row); starting it again in {delay:g} s (nothing is lost: SQL keeps the work, "
             "leases and the sweeper recover it)")
        broker_down = broker_ok is not None and broker_ok() is False
        waited = _wait(stopping, delay, early=broker_ok if broker_down else None)
        if waited == "stopped":
            state.enter("stopped")
            return code
        if waited == "early":
            tell("dreads worker: the broker takes writes again; starting the Celery worker")
        state.restarted()


#: What ended a backoff wait: a stop signal, the broker back, or its time.
_Waited = Literal["stopped", "early", "elapsed"]


def _wait(stopping: threading.Event, seconds: float,
          early: Callable[[], bool | None] | None = None) -> _Waited:
    """Wait ``seconds`` in short ticks (a stop signal's handler runs between them), or until
    ``early()`` (asked about once a second) is true; say which ended the wait."""
    deadline = time.monotonic() + seconds
    next_ask = time.monotonic() + _ASK_S
    while not stopping.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return "elapsed"
        if early is not None and time.monotonic() >= next_ask:
            if early():
                return "stopped" if stopping.is_set() else "early"
            next_ask = time.monotonic() + _ASK_S
        stopping.wait(min(_TICK_S, left))
    return "stopped"


def _stderr(line: str) -> None:
    from app.cli.options import err_console

    err_console.print(line, highlight=False, markup=False, soft_wrap=True)
