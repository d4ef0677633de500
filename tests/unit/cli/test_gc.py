"""The report command pauses the cyclic collector and gives it back as it was, also on error."""

from __future__ import annotations

import gc

import pytest

from app.cli._gc import no_cyclic_gc


def test_collector_is_off_inside_and_back_on_after_even_on_error() -> None:
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), no_cyclic_gc():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        with no_cyclic_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
