"""A command that builds millions of small objects at once runs without the cyclic collector.

A report of a million answered questions holds a few million rows, dicts and tuples; each
full collection walks all of them, and building them triggers one every time the live set
grows by a quarter. None of them form reference cycles (plain data), so reference counting
frees them; the collector is paused for the command and back on after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["no_cyclic_gc"]


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector off inside, as it was after (reference counting stays)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
