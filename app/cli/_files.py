"""Writing a user's file safely: all or nothing.

``atomic_output(path)`` writes to a temporary file in the same directory and renames it over
``path`` (``os.replace``) only when the block succeeds, so a failed command (a run that does
not exist, a full disk, Ctrl-C) leaves the user's file exactly as it was. ``-`` is stdout;
a path that is not a regular file (``/dev/null``, a pipe) is written directly.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from app.errors import InputError

__all__ = ["atomic_output", "check_output_path"]


def check_output_path(path: Path, *, option: str = "-o") -> Path:
    """The real file ``path`` names (symlinks followed), checked to be writable as a file.

    Raises:
        InputError: a directory, a missing directory, or a directory we cannot write to.
    """
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise InputError(f"{option} {str(path)!r} is a directory; give a file name in it")
    parent = target.parent
    if not parent.is_dir():
        raise InputError(f"cannot write {str(path)!r}: the directory {str(parent)!r} does not "
                         "exist")
    if not os.access(parent, os.W_OK | os.X_OK) and not _special(target):
        raise InputError(f"cannot write {str(path)!r}: no permission to write in "
                         f"{str(parent)!r}")
    return target


def _special(target: Path) -> bool:
    """An existing file that is not a regular one (a device, a pipe): written in place."""
    try:
        return not stat.S_ISREG(target.stat().st_mode)
    except FileNotFoundError:
        return False


def _mode_for(target: Path) -> int:
    """The permissions the file would have had if written directly."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextmanager
def atomic_output(path: Path | None, *, option: str = "-o",
                  newline: str | None = None) -> Iterator[IO[str]]:
    """A text handle whose content replaces ``path`` only if the block succeeds (stdout for
    None or ``-``).

    Raises:
        InputError: the file cannot be written (nothing of the user's is changed).
    """
    if path is None or str(path) == "-":
        yield sys.stdout
        return
    target = check_output_path(path, option=option)
    if _special(target):
        with _opened(target, newline) as handle:
            yield handle
        return
    try:
        fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                        suffix=".tmp")
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r}: {exc.strerror}") from exc
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline=newline) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _mode_for(target))
        os.replace(tmp, target)
    except OSError as exc:
        raise InputError(f"cannot write {str(path)!r}: {exc.strerror}; it was left as it "
                         "was") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextmanager
def _opened(target: Path, newline: str | None) -> Iterator[IO[str]]:
    try:
        handle = target.open("w", encoding="utf-8", newline=newline)
    except OSError as exc:
        raise InputError(f"cannot write {str(target)!r}: {exc.strerror}") from exc
    with handle:
        yield handle
