"""Plugins: question kinds and answer sources installed as packages, found through their
entry points, with no edit to dreads::

    [project.entry-points."dreads.question_kinds"]
    ab = "my_package.kinds:AbKind"          # a QuestionKind subclass or instance

    [project.entry-points."dreads.answer_sources"]
    my-endpoint = "my_package.source:SPEC"  # a SourceSpec

Each process registers them once (``load_plugins``): the CLI at start (so ``run``, ``sim``,
``serve``, ``worker`` and ``decide --type`` know them), ``app.api`` on import (before its
request models list the kinds), the Celery app when it is built; ``find_source`` loads them
when a process meets a source name it does not know.
"""

from __future__ import annotations

import functools
from importlib.metadata import EntryPoint, entry_points

from app.engine import (
    QuestionKind,
    SourceSpec,
    register_kind,
    register_source,
    source_names,
    source_spec,
)
from app.errors import ConfigError

__all__ = ["ANSWER_SOURCES", "KINDS_GROUP", "find_source", "load_plugins"]

#: The entry-point group of question kinds; each names a ``QuestionKind`` class or instance.
KINDS_GROUP = "dreads.question_kinds"
#: The entry-point group of answer sources; each entry point names a ``SourceSpec``.
ANSWER_SOURCES = "dreads.answer_sources"


@functools.cache
def load_plugins() -> tuple[str, ...]:
    """Register every installed question kind and answer source (once per process); their
    names.

    Raises:
        ConfigError: an entry point cannot be loaded or names neither a question kind nor a
            ``SourceSpec`` (the message names it).
    """
    installed = entry_points()  # one scan of the installed packages' metadata for both groups
    names = [register_kind(_kind(point)).name for point in installed.select(group=KINDS_GROUP)]
    for point in installed.select(group=ANSWER_SOURCES):
        spec = _loaded(point, "answer source")
        if not isinstance(spec, SourceSpec):
            raise ConfigError(f"the answer source plugin {point.name!r} ({point.value}) "
                              f"names a {type(spec).__name__}, not a SourceSpec")
        names.append(register_source(spec).name)
    return tuple(names)


def find_source(name: str) -> SourceSpec:
    """The answer source called ``name``, looking through the installed plugins when it is not
    one this process knows yet.

    Raises:
        ConfigError: no source has that name (the message lists what to pass), or a plugin
            cannot be loaded.
    """
    if str(name) not in source_names():
        load_plugins()
    return source_spec(name)


def _kind(point: EntryPoint) -> QuestionKind:
    found = _loaded(point, "question kind")
    kind = found() if isinstance(found, type) else found
    if not isinstance(kind, QuestionKind):
        raise ConfigError(f"the question kind plugin {point.name!r} ({point.value}) names "
                          f"{found!r}, not a QuestionKind")
    return kind


def _loaded(point: EntryPoint, what: str) -> object:
    try:
        return point.load()
    except Exception as exc:  # a broken plugin: say which, whatever it raised
        raise ConfigError(f"the {what} plugin {point.name!r} ({point.value}) cannot be "
                          f"loaded: {exc!r}") from exc
