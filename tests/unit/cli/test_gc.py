"""The report command pauses the cyclic collector and gives it back as it was, also on error."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from app.cli._gc import no_cyclic_gc


@pytest.fixture
def collector_state() -> Iterator[None]:
    was_on = gc.isenabled()
    yield
    (gc.enable if was_on else gc.disable)()


@pytest.mark.usefixtures("collector_state")
def test_collector_is_off_inside_and_back_on_after_even_on_error() -> None:
    gc.enable()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), no_cyclic_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    with no_cyclic_gc():
        pass
    assert not gc.isenabled()
