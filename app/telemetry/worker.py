"""What the workers count: every metric of a worker process, defined once, with the small
functions the runner, the sweeper and the readiness wait call.

In a Celery prefork pool each child process writes its own values to
``PROMETHEUS_MULTIPROC_DIR`` (``dreads worker`` sets it up) and the main process's exporter
adds them up; in one process (``dreads run``, ``dreads serve --executor local``) they are plain
in-memory metrics of the default registry.

Counters keep their name without ``_total`` here; Prometheus shows them with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

from app.engine import Answer, redact_url
from app.errors import outcome_class
from app.store.views import LOW_MASS as LOW_LABEL_MASS

__all__ = [
    "LOW_LABEL_MASS",
    "record_answers",
    "record_attempt",
    "record_lease_takeovers",
    "record_read",
    "record_sweep",
    "set_upstream_ready",
    "start_run",
]

disable_created_metrics()  # no ``*_created`` series beside every counter and histogram

READS = Counter(
    "dreads_reads", "Reads (requests sent to the model server), by outcome: ok (an answer came "
    "back; rows that miss a label fail the decision's attempt as malformed_response later), "
    "or the error kind after the upstream client's own retries.", ["run", "outcome"])
READ_SECONDS = Histogram(
    "dreads_read_seconds", "Seconds one read took, retries and queueing in vLLM included.",
    ["run"], buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
ATTEMPTS = Counter(
    "dreads_decision_attempts", "Decision attempts recorded in SQL, by outcome kind (ok: the "
    "decision was answered; else the failure kind of its attempt row), with its class: read "
    "or infrastructure (app.errors.OutcomeClass).", ["run", "outcome", "class"])
ANSWERS = Counter("dreads_answers", "Answers kept (one per question of a decision answered "
                  "first), by the draw policy's stop reason.", ["run", "stop_reason"])
ANSWER_DRAWS = Histogram("dreads_answer_draws", "Draws behind each answer kept (a draw: the "
                         "question read once; a joint read draws each question of its "
                         "canvas).", ["run"],
                         buckets=(1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64))
LABEL_MASS = Histogram(
    "dreads_answer_label_mass", "Probability mass on the question's labels, per answer kept "
    "(near 1: the model answers with a label; low: it answers something else).", ["run"],
    buckets=(0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0))
LOW_MASS = Counter("dreads_answers_low_label_mass",
                   f"Answers kept whose label mass is under {LOW_LABEL_MASS}.", ["run"])
ARGMAX_NOT_LABEL = Counter("dreads_answers_argmax_not_label",
                           "Answers kept whose most likely token is not one of the labels.",
                           ["run"])
LEASE_TAKEOVERS = Counter(
    "dreads_lease_takeovers", "Leases this worker held that it found taken over when renewing "
    "them (it was too slow or cut off; the first finished attempt wins).", ["run"])
SWEEP_EXPIRED = Counter(
    "dreads_sweeper_expired_leases", "Expired leases the sweeper took back: worker_lost (back "
    "to pending) or poison (failed at the attempt cap).", ["outcome"])
SWEEP_REPUBLISHED = Counter("dreads_sweeper_republished_decisions",
                            "Decisions the sweeper (re-)published to the broker.")
UPSTREAM_READY = Gauge(
    "dreads_upstream_ready", "1 once this worker's upstream answered a probe read; 0 while it "
    "waits for it, or after a chunk found it down and until it answers again.", ["upstream"],
    multiprocess_mode="livemostrecent")


# Series that exist from the start at zero, so rate() and the dashboard see them before the
# first event (Prometheus cannot tell "none yet" from "not exported").
for _kind in ("worker_lost", "poison"):
    SWEEP_EXPIRED.labels(_kind)


def start_run(run: str) -> None:
    """A worker took its first chunk of ``run``: its rare-event counters start at zero."""
    for counter in (LEASE_TAKEOVERS, LOW_MASS, ARGMAX_NOT_LABEL):
        counter.labels(run)


def record_read(run: str, outcome: str, seconds: float) -> None:
    READS.labels(run, outcome).inc()
    READ_SECONDS.labels(run).observe(seconds)


def record_attempt(run: str, outcome: str) -> None:
    """Called once per attempt row written (the SQL ``attempts`` table counts the same)."""
    ATTEMPTS.labels(run, outcome, outcome_class(outcome)).inc()


def record_answers(run: str, answers: Iterable[Answer]) -> None:
    """The answers of a decision whose attempt won (they are the ones kept in SQL)."""
    for answer in answers:
        ANSWERS.labels(run, str(answer.stop_reason)).inc()
        ANSWER_DRAWS.labels(run).observe(answer.draws)
        if answer.label_mass is not None:  # None: the decision endpoint did not report it
            LABEL_MASS.labels(run).observe(answer.label_mass)
            if answer.label_mass < LOW_LABEL_MASS:  # as ``dreads status`` counts them
                LOW_MASS.labels(run).inc()
        if answer.argmax_is_label is False:
            ARGMAX_NOT_LABEL.labels(run).inc()


def record_lease_takeovers(run: str, n: int) -> None:
    if n > 0:
        LEASE_TAKEOVERS.labels(run).inc(n)


def record_sweep(*, lost: int, poisoned: int, published: int) -> None:
    if lost:
        SWEEP_EXPIRED.labels("worker_lost").inc(lost)
    if poisoned:
        SWEEP_EXPIRED.labels("poison").inc(poisoned)
    if published:
        SWEEP_REPUBLISHED.inc(published)


def set_upstream_ready(upstream: str, ready: bool) -> None:
    """``upstream``: the base URL this worker reads from."""
    UPSTREAM_READY.labels(redact_url(upstream)).set(1.0 if ready else 0.0)
