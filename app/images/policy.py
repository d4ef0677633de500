"""What a process may fetch: the directories ``file://`` images may come from, the largest
image in bytes and in pixels, the images one decision may carry, the time one fetch may take
(``DREADS_IMAGE_DIRS``, ``DREADS_IMAGE_MAX_BYTES``, ``DREADS_IMAGE_MAX_PIXELS``,
``DREADS_IMAGE_MAX_COUNT``, ``DREADS_IMAGE_MAX_TOTAL_BYTES``, ``DREADS_IMAGE_TIMEOUT``), and,
on ``dreads serve``, which addresses it may fetch from (``DREADS_FETCH_ALLOW``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.images.guard import FetchGuard

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_MAX_COUNT", "DEFAULT_MAX_PIXELS",
           "DEFAULT_MAX_TOTAL_BYTES", "DEFAULT_TIMEOUT_S", "ImagePolicy", "parse_image_dirs"]

#: The largest image fetched, in bytes (20 MiB, as an OpenAI image input).
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
#: Seconds one image's fetch may take in all: connection, redirects and body together.
DEFAULT_TIMEOUT_S = 30.0
#: The most pixels an image may have, read from its header before it is decoded: 40 times
#: what DiffusionGemma's processor keeps (at most 280 soft tokens of 48 x 48 pixels, about
#: 0.65 megapixels; a larger image is scaled down to that), so a 24-megapixel photo passes and
#: a decompression bomb is refused unread.
DEFAULT_MAX_PIXELS = 25_000_000
#: The most images one decision (a job line, one request) may carry, as vLLM's
#: ``--limit-mm-per-prompt``.
DEFAULT_MAX_COUNT = 16
#: The most image bytes (fetched or decoded from data URLs) of one decision, all together.
DEFAULT_MAX_TOTAL_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ImagePolicy:
    """Limits on fetching images. No directory is allowed unless given: a job file cannot make
    a worker read a file it was not meant to."""

    allowed_dirs: tuple[Path, ...] = ()  #: resolved (symlinks followed)
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_count: int = DEFAULT_MAX_COUNT
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES
    #: the addresses http(s) images may come from: None, any (the CLI: the operator's own
    #: files); a guard (``dreads serve``): public ones and those ``DREADS_FETCH_ALLOW`` opens
    guard: FetchGuard | None = None

    def allows(self, path: Path) -> bool:
        """Whether ``path`` (resolved, symlinks followed) lies under an allowed directory."""
        return any(path.is_relative_to(folder) for folder in self.allowed_dirs)

    def dirs_text(self) -> str:
        return os.pathsep.join(str(d) for d in self.allowed_dirs) or "none"


def parse_image_dirs(text: str | None) -> tuple[Path, ...]:
    """``DREADS_IMAGE_DIRS``: directories separated by ``os.pathsep`` (``:`` on Linux, as
    ``PATH``), each resolved; empty entries are skipped."""
    if not text:
        return ()
    return tuple(Path(part).expanduser().resolve() for part in text.split(os.pathsep)
                 if part.strip())
