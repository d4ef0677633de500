"""The breaker closes by itself: a run paused by its server is probed, and resumes.

A run the breaker paused (``app.runs.breaker``: its recent attempts kept failing with a
server error, an unreachable server, timeouts or throttling) is half-open: every
``BreakerPolicy.probe_s`` one probe read at the run's canvas width goes to its server; when it
is answered, the run is active again (``app.store.breaker.unpause_run``: its breaker count
starts over, its queued decisions back to pending for the next sweep or round). A run paused
by its budget is never probed (it waits for the operator's ``resume`` with a higher budget),
nor one paused longer than ``give_up_s``.

Workers probe from a thread of their main process (``ProberThread``): each takes a due probe
with a guarded UPDATE of ``runs.probed_at`` (``take_probe``), so N workers probe a run once an
interval, not N times; a worker probes only the runs its upstream serves (their queue is the
one it consumes). ``dreads run`` (and ``dreads serve``'s local executor) probes with the
upstream it reads from, waiting in place (``wait_half_open``), and takes each probe the same
way.

What each says, one line per change: ``run R paused: server unreachable since 12:03:10,
probing every 10 s`` ... ``run R resumed at 12:03:41 after 31 s``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from app.engine import ReadRequest
from app.errors import BudgetReached, DreadsError
from app.runs.breaker import BreakerPolicy
from app.runs.budget import check_budget
from app.runs.periodic import PeriodicThread
from app.store.breaker import pause_kind, probe_candidates, take_probe, unpause_run
from app.store.db import session_scope
from app.store.queue import database_now, utcnow
from app.store.records import PauseKind, RunInfo, RunStatus
from app.store.runs import find_run
from app.store.types import SessionFactory
from app.upstream.base import Upstream

__all__ = ["PROBE_TIMEOUT_S", "ProbeRound", "ProberThread", "paused_line", "probe_due_runs",
           "probe_read", "resume_probed", "resumed_line", "wait_half_open"]

log = logging.getLogger("dreads.breaker")

#: The longest one probe read may take (shorter when probes come more often).
PROBE_TIMEOUT_S = 10.0
#: Say what a probe found: a line for the user (or None: nothing to say).
Notify = Callable[[str], None]


def _clock(at: datetime | None) -> str:
    """``12:03:10``: ``at`` (UTC when it has no zone, as SQLite returns it) on this machine's
    clock."""
    if at is None:
        return "?"
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return aware.astimezone().strftime("%H:%M:%S")


def _seconds_since(at: datetime | None, now: datetime) -> float:
    if at is None:
        return 0.0
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    return max(0.0, (now - aware).total_seconds())


def paused_line(run_name: str, paused_at: datetime | None, policy: BreakerPolicy) -> str:
    """What a half-open run says once: since when, and how often it is probed."""
    give_up = (f", for at most {policy.give_up_s:g} s" if policy.give_up_s is not None
               else "")
    return (f"run {run_name} paused: server unreachable since {_clock(paused_at)}, probing "
            f"every {policy.probe_s:g} s{give_up}")


def resumed_line(run_name: str, paused_at: datetime | None, now: datetime) -> str:
    """What a run that resumed by itself says."""
    return (f"run {run_name} resumed at {_clock(now)} after "
            f"{_seconds_since(paused_at, now):.0f} s (its server answered a probe read)")


async def probe_read(upstream: Upstream, probe: ReadRequest | None,
                     timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """One probe of ``upstream``: its model list, then the read ``probe``. None when it
    answered; else why not."""
    try:
        await asyncio.wait_for(upstream.wait_ready(timeout_s=timeout_s, probe=probe),
                               timeout_s + 5.0)
    except DreadsError as exc:  # unreachable, failing, or refusing the read
        return exc.message
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    return None


def resume_probed(factory: SessionFactory, run: RunInfo) -> str | None:
    """Close the breaker of ``run`` after a probe read was answered; None when it resumed,
    else why it stays paused (its budget, or it is no longer paused by the breaker)."""
    with session_scope(factory) as session:
        if pause_kind(session, run.id) != PauseKind.BREAKER:
            return "not paused by the breaker any more"
        try:
            check_budget(session, run.id, run.name)
        except BudgetReached as exc:
            return exc.message
        return None if unpause_run(session, run.id) else "not paused any more"


@dataclass(frozen=True)
class ProbeRound:
    """What one round of a worker's prober did."""

    probed: tuple[str, ...] = ()  #: runs probed
    resumed: tuple[str, ...] = ()  #: of them, resumed


def probe_due_runs(factory: SessionFactory, policy: BreakerPolicy,
                   probe: Callable[[RunInfo], str | None], *,
                   serves: Callable[[RunInfo], bool]) -> ProbeRound:
    """One round of a worker's prober: every run paused by the breaker whose probe is due and
    that this worker ``serves`` is probed (``probe``: None when its server answered, else why
    not) once the guarded UPDATE gave it the probe, and resumed when answered."""
    if not policy.probes:
        return ProbeRound()
    with session_scope(factory) as session:
        now = database_now(session)
        due = probe_candidates(session, now=now, interval_s=policy.probe_s,
                               give_up_s=policy.give_up_s)
    probed: list[str] = []
    resumed: list[str] = []
    for run, probed_at in due:
        if not serves(run):
            continue
        with session_scope(factory) as session:
            if not take_probe(session, run.id, now=database_now(session),
                              interval_s=policy.probe_s, give_up_s=policy.give_up_s):
                continue  # another worker probes it
        if probed_at is None:
            log.warning("%s", paused_line(run.name, run.paused_at, policy))
        probed.append(run.name)
        why = probe(run)
        if why is not None:
            log.info("run %s: probe read failed (%s); still paused", run.name, why)
            continue
        refused = resume_probed(factory, run)
        if refused is None:
            resumed.append(run.name)
            log.warning("%s", resumed_line(run.name, run.paused_at, utcnow()))
        else:
            log.warning("run %s: its server answers, but it stays paused: %s", run.name,
                        refused)
    return ProbeRound(probed=tuple(probed), resumed=tuple(resumed))


class ProberThread(PeriodicThread):
    """Calls ``probe_round`` every ``interval_s`` until ``stop()``; errors are logged, never
    fatal (a database that is down is tried again next round)."""

    def __init__(self, probe_round: Callable[[], ProbeRound], *, interval_s: float) -> None:
        super().__init__(probe_round, interval_s=interval_s, name="dreads-breaker-prober",
                         what="breaker probe round", log=log)


async def wait_half_open(factory: SessionFactory, run: RunInfo, upstream: Upstream,
                         probe: ReadRequest | None, policy: BreakerPolicy, *,
                         notify: Notify | None = None) -> bool:
    """``dreads run``'s half-open wait, after its run paused: True once a probe read was
    answered and the run resumed (or it is no longer paused: resumed by hand, or cancelled,
    which the next round finds); False at once when it was not paused by the breaker or
    probes are off, or once it has been paused ``give_up_s`` (it stays paused)."""
    state = await asyncio.to_thread(_pause_of, factory, run.name)
    if state is None or state[0] != PauseKind.BREAKER or not policy.probes:
        return False
    paused_at = state[1]
    say = notify or (lambda line: log.warning("%s", line))
    say(paused_line(run.name, paused_at, policy))
    timeout_s = min(PROBE_TIMEOUT_S, policy.probe_s)
    while True:
        await asyncio.sleep(policy.probe_s)
        now_state = await asyncio.to_thread(_pause_of, factory, run.name)
        if now_state is None or now_state[0] != PauseKind.BREAKER:
            return now_state is None  # resumed (or cancelled) meanwhile: the rounds say which
        if (policy.give_up_s is not None
                and _seconds_since(paused_at, utcnow()) >= policy.give_up_s):
            say(f"run {run.name}: no answer from its server within {policy.give_up_s:g} s "
                "(DREADS_BREAKER_GIVE_UP_S): it stays paused")
            return False
        if not await asyncio.to_thread(_take_probe, factory, run.id, policy):
            continue  # a worker's prober probed it this interval: it resumes it if answered
        why = await probe_read(upstream, probe, timeout_s)
        if why is not None:
            log.info("run %s: probe read failed (%s); still paused", run.name, why)
            continue
        refused = await asyncio.to_thread(resume_probed, factory, run)
        if refused is not None:
            say(f"run {run.name}: its server answers, but it stays paused: {refused}")
            return False
        say(resumed_line(run.name, paused_at, utcnow()))
        return True


def _take_probe(factory: SessionFactory, run_id: int, policy: BreakerPolicy) -> bool:
    """Whether this wait probes now: the guarded UPDATE the workers' probers take too, so a
    run probed by ``dreads run`` and by workers is probed once an interval. A tenth of the
    interval is slack: this wait's own stamp of the last round never makes it skip one."""
    with session_scope(factory) as session:
        return take_probe(session, run_id, now=database_now(session),
                          interval_s=policy.probe_s * 0.9, give_up_s=policy.give_up_s)


def _pause_of(factory: SessionFactory, name: str) -> tuple[str | None, datetime | None] | None:
    """(what paused the run, when), or None when it is not paused."""
    with session_scope(factory) as session:
        info = find_run(session, name)
    if info is None or info.status != RunStatus.PAUSED:
        return None
    return info.pause_kind, info.paused_at
