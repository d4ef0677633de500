"""Plugins: the question kinds installed under the ``dreads.question_kinds`` entry point
group, registered at each process's start (the CLI, and so ``dreads sim``, ``serve`` and
``worker``; ``app.api.app``'s factory for a server started another way).

An entry point names a ``QuestionKind`` subclass or instance::

    [project.entry-points."dreads.question_kinds"]
    ab = "my_package.kinds:AbKind"
"""

from __future__ import annotations

from importlib.metadata import entry_points

from app.engine import QuestionKind, register_kind

__all__ = ["KINDS_GROUP", "load_plugins"]

KINDS_GROUP = "dreads.question_kinds"
_loaded: list[bool] = []


def load_plugins() -> tuple[str, ...]:
    """Register every installed question kind (once per process); their names.

    Raises:
        TypeError: an entry point names something that is not a question kind.
    """
    if _loaded:
        return ()
    _loaded.append(True)
    names = []
    for point in entry_points(group=KINDS_GROUP):
        found = point.load()
        kind = found() if isinstance(found, type) else found
        if not isinstance(kind, QuestionKind):
            raise TypeError(f"entry point {point.name!r} of {KINDS_GROUP} names {found!r}, "
                            "not a QuestionKind")
        names.append(register_kind(kind).name)
    return tuple(names)
