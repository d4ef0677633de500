"""The lines of a job file read in bounded memory: a line over ``MAX_LINE_BYTES`` is skipped
to its end a piece at a time and reported by its length, never held whole (a 400 MB line
uploaded gzip-compressed is a bad line, not 20 GB of memory)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

__all__ = ["MAX_LINE_BYTES", "Overlong", "bounded_lines"]

#: The longest job line read: what a line may carry at most, its images as data URLs
#: (``DREADS_IMAGE_MAX_TOTAL_BYTES``, 64 MiB, base64: 86 MiB) and the longest state a model
#: reads (a few million characters), with room to spare.
MAX_LINE_BYTES = 128 * 1024 * 1024
_PIECE = 1024 * 1024


class Overlong(int):
    """The length in bytes of a line over the limit (skipped, not read)."""


def bounded_lines(raw: IO[bytes], max_bytes: int = MAX_LINE_BYTES) -> Iterator[bytes | Overlong]:
    """Each line of ``raw`` with its newline, or the ``Overlong`` length of one over
    ``max_bytes`` (read past a piece at a time)."""
    while line := raw.readline(max_bytes + 1):
        if len(line) <= max_bytes or line.endswith(b"\n"):
            yield line
            continue
        size = len(line)
        del line
        while piece := raw.readline(_PIECE):
            size += len(piece)
            if piece.endswith(b"\n"):
                break
        yield Overlong(size)
