"""What a process may fetch: the directories ``file://`` images may come from, the largest
image, the time one fetch may take (``DREADS_IMAGE_DIRS``, ``DREADS_IMAGE_MAX_BYTES``,
``DREADS_IMAGE_TIMEOUT``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_MAX_BYTES", "DEFAULT_TIMEOUT_S", "ImagePolicy", "parse_image_dirs"]

#: The largest image fetched, in bytes (20 MiB, as an OpenAI image input).
DEFAULT_MAX_BYTES = 20 * 1024 * 1024
#: Seconds one image's fetch may take, connection and body together.
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ImagePolicy:
    """Limits on fetching images. No directory is allowed unless given: a job file cannot make
    a worker read a file it was not meant to."""

    allowed_dirs: tuple[Path, ...] = ()  #: resolved (symlinks followed)
    max_bytes: int = DEFAULT_MAX_BYTES
    timeout_s: float = DEFAULT_TIMEOUT_S

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
