"""``endpoint_url``: the route a decision endpoint's source posts to, under any spelling of
the run's ``--answer-url``."""

from __future__ import annotations

import pytest

from app.engine import source_spec
from app.errors import ConfigError
from app.upstream.endpoint import endpoint_url


@pytest.mark.parametrize("base", ["http://h:8000", "http://h:8000/", "http://h:8000/v1",
                                  "http://h:8000/v1/systemone"])
def test_every_spelling_of_the_base_url_names_the_source_route(base: str) -> None:
    assert endpoint_url(base, source_spec("systemone").path) == "http://h:8000/v1/systemone"


def test_a_reads_source_has_no_route() -> None:
    with pytest.raises(ConfigError, match="no decision endpoint"):
        endpoint_url("http://h:8000", source_spec("reads").path)
