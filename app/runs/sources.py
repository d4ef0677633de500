"""A run's own files: the job files it was submitted from and the answer keys beside them.

``dreads submit`` and ``dreads run`` record each job file's resolved absolute path with the
run (``app.store.sources``); every command that writes a user's file (``export -o``,
``report --html``, ``calibrate -o``) checks its target here first and refuses to write over
such a file, whatever the spelling (a relative path, ``./x``, a symlink, a hard link).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from app.errors import InputError
from app.sim.key import answer_key_of
from app.store.sources import source_files
from app.store.types import Session

__all__ = ["check_not_run_file", "free_name", "recorded_path"]


def recorded_path(job_file: Path) -> str:
    """How a job file is recorded with its run: its resolved absolute path."""
    return str(job_file.resolve())


def _same_file(target: Path, recorded: Path) -> bool:
    """Whether ``target`` and ``recorded`` name one file: the same inode where both exist,
    else the same resolved path."""
    try:
        return os.path.samefile(target, recorded)
    except OSError:
        return os.path.realpath(target) == os.path.realpath(recorded)


def _run_files(sources: Iterable[tuple[str, str]]) -> Iterator[tuple[str, str, Path]]:
    """(run, what, path) of each job file and its answer key."""
    for run, path in sources:
        job_file = Path(path)
        yield run, "job file", job_file
        yield run, "answer key", answer_key_of(job_file)


def check_not_run_file(session: Session, target: Path, *, option: str,
                       instead: str | None = None) -> None:
    """Refuse to write ``target`` when it is a job file a run of this store was submitted
    from, or the answer key beside one. ``instead``: a file name to suggest.

    Raises:
        InputError: names the run and the file; nothing is written.
    """
    for run, what, path in _run_files(source_files(session)):
        if _same_file(target, path):
            other = f"{option} {instead}" if instead else "another file"
            raise InputError(f"{option} {str(target)!r} is the {what} of run {run!r} "
                             f"({path}); not writing over it: write to {other}")


def free_name(candidates: Iterable[str], taken: Iterable[str]) -> str:
    """The first of ``candidates`` (paths relative to the working directory) that names none
    of the files ``taken`` (recorded job files) nor their answer keys."""
    files = [path for _, _, path in _run_files(("", p) for p in taken)]
    names = list(candidates)
    for name in names:
        if not any(_same_file(Path(name), path) for path in files):
            return name
    return names[-1]
