"""``file://`` images: only under a directory the user allows (``DREADS_IMAGE_DIRS``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from urllib.parse import unquote, urlsplit

from app.errors import ImageError
from app.images.limits import image_too_large
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
    try:
        parts = urlsplit(ref)
    except ValueError as exc:  # file://[x
        raise ImageError(f"image {short_ref(ref)}: not a valid URL ({exc}); write a file as "
                         "file:///path/to/image.png") from None
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
    if not policy.allows(path) and policy.guard is not None:
        # a server's client learns neither where a link leads nor which directories are open
        raise ImageError(f"image {short_ref(ref)}: outside the directories images may be read "
                         "from on this server; send the image as a data URL or over https, or "
                         "ask its operator (DREADS_IMAGE_DIRS)")
    if not policy.allows(path):
        raise ImageError(f"image {short_ref(ref)}: {path} is outside the directories images "
                         f"may be read from ({policy.dirs_text()}); add its directory to "
                         "DREADS_IMAGE_DIRS (or --image-dirs)")
    return path


def read_file(ref: str, policy: ImagePolicy) -> bytes:
    """The bytes of an allowed ``file://`` image, at most ``policy.max_bytes``. Only a regular
    file is read: a FIFO, a device or a directory is refused without being waited on (checked
    before it is opened, opened without blocking, and checked again once open).

    Raises:
        ImageError: outside the allowed directories, not a regular file, unreadable, or too
            large.
    """
    path = file_path(ref, policy)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise _not_regular(ref)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):  # replaced between the check and the open
                raise _not_regular(ref)
            if info.st_size > policy.max_bytes:
                raise image_too_large(ref, policy.max_bytes, info.st_size)
            data = handle.read(policy.max_bytes + 1)
    except OSError as exc:
        raise ImageError(f"image {short_ref(ref)}: cannot be read ({exc.strerror or exc}); "
                         "check that the file exists and is readable") from None
    if len(data) > policy.max_bytes:  # grew since it was measured
        raise image_too_large(ref, policy.max_bytes)
    return data


def _not_regular(ref: str) -> ImageError:
    return ImageError(f"image {short_ref(ref)}: not a regular file (a pipe, a device or a "
                      "directory); give the path of an image file")
