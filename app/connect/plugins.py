"""Plugins: answer sources installed as packages, found through their entry points.

A package adds an answer source (``app.engine.sources``) by naming its ``SourceSpec`` in its
metadata, with no edit to dreads::

    [project.entry-points."dreads.answer_sources"]
    my-endpoint = "my_package.source:SPEC"

A process loads them the first time it meets a source name it does not know (``find_source``:
``--answer-by``, the API's ``answer_by``, a worker given a run's chunk), so a command that
never does pays nothing for the lookup.
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

from app.engine import SourceSpec, register_source, source_names, source_spec
from app.errors import ConfigError

__all__ = ["ANSWER_SOURCES", "find_source", "load_plugins"]

#: The entry-point group of answer sources; each entry point names a ``SourceSpec``.
ANSWER_SOURCES = "dreads.answer_sources"


@functools.cache
def load_plugins() -> tuple[str, ...]:
    """Register every installed answer source (once per process); their names.

    Raises:
        ConfigError: an entry point cannot be loaded or names no ``SourceSpec``.
    """
    names = []
    for point in entry_points(group=ANSWER_SOURCES):
        try:
            spec = point.load()
        except Exception as exc:  # a broken plugin: say which, whatever it raised
            raise ConfigError(f"the answer source plugin {point.name!r} ({point.value}) "
                              f"cannot be loaded: {exc!r}") from exc
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
