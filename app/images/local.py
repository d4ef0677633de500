"""``file://`` images: only under a directory the user allows (``DREADS_IMAGE_DIRS``)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

from app.errors import ImageError
from app.images.policy import ImagePolicy
from app.images.refs import short_ref

__all__ = ["file_path", "read_file"]


def file_path(ref: str, policy: ImagePolicy) -> Path:
    """The file a ``file://`` URL names, resolved (symlinks followed), once it is known to lie
    under an allowed directory.

    Raises:
        ImageError: a host other than localhost, a NUL character, a relative path, or a file
            outside the allowed directories.
    """
    parts = urlsplit(ref)
    if parts.netloc not in ("", "localhost"):
        raise ImageError(f"image {short_ref(ref)}: a file:// URL names a file on this machine "
                         "(file:///path/to/image.png); fetch remote images over http(s)")
    text = unquote(parts.path)
    if "\x00" in text:
        raise ImageError(f"image {short_ref(ref)}: a file:// URL holds a NUL character (%00), "
                         "which no file name has; remove it")
    raw = Path(text)
    if not raw.is_absolute():
        raise ImageError(f"image {short_ref(ref)}: a file:// URL needs an absolute path "
                         "(file:///path/to/image.png)")
    path = raw.resolve()
    if not policy.allows(path):
        raise ImageError(f"image {short_ref(ref)}: {path} is outside the directories images "
                         f"may be read from ({policy.dirs_text()}); add its directory to "
                         "DREADS_IMAGE_DIRS (or --image-dirs)")
    return path


def read_file(ref: str, policy: ImagePolicy) -> bytes:
    """The bytes of an allowed ``file://`` image, at most ``policy.max_bytes``.

    Raises:
        ImageError: outside the allowed directories, unreadable, or too large.
    """
    path = file_path(ref, policy)
    try:
        size = path.stat().st_size
        if size > policy.max_bytes:
            raise ImageError(f"image {short_ref(ref)}: {size:,} bytes, over the limit of "
                             f"{policy.max_bytes:,}; shrink it or raise DREADS_IMAGE_MAX_BYTES")
        with path.open("rb") as handle:
            return handle.read(policy.max_bytes + 1)
    except OSError as exc:
        raise ImageError(f"image {short_ref(ref)}: cannot be read ({exc.strerror or exc}); "
                         "check that the file exists and is readable") from None
