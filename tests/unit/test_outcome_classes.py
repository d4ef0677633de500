"""Every attempt outcome is the infrastructure's or the read's, never both, never neither: the
split status, the report, the run page and /metrics count failures by."""

from __future__ import annotations

from app.errors import (
    INFRASTRUCTURE_KINDS,
    READ_KINDS,
    OutcomeClass,
    OutcomeKind,
    outcome_class,
)


def test_every_outcome_kind_has_exactly_one_class() -> None:
    assert set(OutcomeKind) == INFRASTRUCTURE_KINDS | READ_KINDS
    assert not INFRASTRUCTURE_KINDS & READ_KINDS


def test_what_happens_around_a_read_is_the_infrastructure() -> None:
    for kind in ("worker_lost", "cancelled", "paused", "upstream_unreachable", "server_error",
                 "timeout", "db_error", "not_served", "unauthorized", "publish_error"):
        assert OutcomeKind(kind).outcome_class is OutcomeClass.INFRASTRUCTURE, kind


def test_what_the_decision_would_meet_again_is_the_read() -> None:
    for kind in ("ok", "malformed_response", "bad_request", "refused", "rejected", "poison",
                 "image_changed"):
        assert OutcomeKind(kind).outcome_class is OutcomeClass.READ, kind


def test_a_stored_kind_this_version_does_not_know_is_counted_as_the_read() -> None:
    assert outcome_class("worker_lost") is OutcomeClass.INFRASTRUCTURE
    assert outcome_class("something_new") is OutcomeClass.READ
