"""Fixtures of the durability scenarios: a simulator subprocess and a stack on fresh services."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.services import RedisServer
from tests.integration.durability.harness import Sim, Stack


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Sim]:
    server = Sim(tmp_path / "sim.log")
    yield server
    server.stop()


@pytest.fixture
def stack(pg_url: str, redis_server: RedisServer, sim: Sim) -> Iterator[Stack]:
    """A fresh database on the shared PostgreSQL, a private Redis (AOF on), the simulator."""
    with Stack.open(pg_url, redis_server.url, sim.url) as opened:
        yield opened
