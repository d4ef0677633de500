"""``OutageLog``: an outage's retries are a line when it starts, a reminder at most every
``remind_s``, and a line when a request sent after it began succeeds; each retry at DEBUG."""

from __future__ import annotations

import logging

import pytest

from app.upstream.outage import OutageLog


def test_an_outage_is_told_in_a_few_lines(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    logger = logging.getLogger("dreads.test.outage")
    outage = OutageLog("http://pod:8001", logger, remind_s=30.0, clock=lambda: now[0])
    in_flight = -1.0  # a read sent before the outage
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        for i in range(600):  # 600 retries, one every 0.1 s
            now[0] = i / 10
            outage.retrying("server_error", "server error 503", "retry 1/4 in 0.30s")
        now[0] = 60.0
        outage.succeeded(in_flight)  # an answer already on its way: still an outage
        assert outage.ongoing
        outage.succeeded(outage.now())
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 600
    assert len(warnings) == 3, warnings  # started, one reminder after 30 s, back
    assert warnings[0].startswith("reads at http://pod:8001 failing since ")
    assert "still failing" in warnings[1] and "301 retried so far" in warnings[1]
    assert "succeed again" in warnings[2] and "after 60.0s failing (600 retried)" in warnings[2]
    assert not outage.ongoing


def test_no_outage_no_line(caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog("http://pod:8001", logging.getLogger("dreads.test.outage"))
    with caplog.at_level(logging.DEBUG):
        outage.succeeded(outage.now())
    assert caplog.records == []
