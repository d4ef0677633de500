"""The answer sources' registry: the built-in specs, what a registered source must be, and what
a name nobody registered means."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from app.engine import (
    ReadSettings,
    SourceSpec,
    draw_span,
    plans_reads,
    register_source,
    settings_hash,
    settings_to_dict,
    source_names,
    source_spec,
    stored_plans_reads,
)
from app.engine.estimate import Span
from app.engine.sources import SOURCES
from app.engine.systemone import read_systemone, systemone_request
from app.errors import ConfigError

OURS = SourceSpec("ours", "a test's endpoint", path="/v2/ask", ask=systemone_request,
                  read=read_systemone)


@pytest.fixture
def ours() -> Iterator[SourceSpec]:
    yield register_source(OURS)
    SOURCES.pop(OURS.name)


def test_the_built_in_sources_and_their_routes() -> None:
    assert source_names() == ("reads", "systemone", "decisions")
    assert [(source_spec(n).plans_reads, source_spec(n).path) for n in source_names()] == [
        (True, ""), (False, "/v1/systemone"), (False, "/v1/decisions")]


def test_a_registered_source_is_an_endpoint_like_the_built_in_ones(ours: SourceSpec) -> None:
    assert source_spec("ours") is ours and source_names()[-1] == "ours"
    assert not plans_reads("ours") and plans_reads(None) and plans_reads("reads")
    settings = ReadSettings(answer_by="ours", answer_url="http://x:8000")
    assert draw_span(settings) == Span(1, 1) and draw_span(ReadSettings()) == Span(1, 4)
    stored = settings_to_dict(settings)
    assert stored["answer_by"] == "ours" and not stored_plans_reads(stored)
    assert settings_hash(settings) != settings_hash(replace(settings, answer_by="systemone"))
    register_source(OURS)  # the same spec again: nothing changes


def test_a_registered_name_is_taken_once_and_only_by_an_endpoint(ours: SourceSpec) -> None:
    with pytest.raises(ConfigError, match="registered already"):
        register_source(replace(OURS, path="/v3/ask"))
    with pytest.raises(ConfigError, match="no path"):
        register_source(SourceSpec("reader", "reads again"))
    with pytest.raises(ConfigError, match="needs a path, ask and read"):
        SourceSpec("half", "no reader", path="/v1/x", ask=systemone_request)
    with pytest.raises(ConfigError, match="lowercase"):
        SourceSpec("Bad Name", "x")


def test_an_unknown_name_lists_the_sources_and_reads_as_an_endpoint() -> None:
    with pytest.raises(ConfigError, match="unknown answer source 'nobody': pass --answer-by "
                       "reads, systemone, decisions"):
        source_spec("nobody")
    assert not plans_reads("nobody")  # a plugin this process has not loaded: an endpoint
