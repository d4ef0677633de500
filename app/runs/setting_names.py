"""How a user names each run setting: the option typed on the command line and the query
parameter of the API, as the table of read options (``app.runs.read_options``) declares them.
(A ``DREADS_*`` variable sets only a new run's settings, so a mismatch with an existing run
always comes from an option.)

The store reports a settings mismatch by field name (``RunSettingsMismatch.changes``); the
entry points word it here: ``dreads`` as ``--mode isolated -> joint``, the API as
``mode: isolated -> joint``.
"""

from __future__ import annotations

from typing import Any

from app.errors import RunSettingsMismatch, SettingChange
from app.runs.read_options import READ_OPTIONS, REPLICATES, ReadOption

__all__ = ["SETTING_NAMES", "api_words", "cli_words"]


#: Run setting (``ReadSettings`` field, and the run's replicate count) -> its read option
#: (``.option`` typed on the command line, ``.param`` of the API).
SETTING_NAMES: dict[str, ReadOption] = {
    option.field: option for option in (*READ_OPTIONS, REPLICATES)}


def _value(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _change(name: str, change: SettingChange) -> str:
    return f"{name} {_value(change.old)} -> {_value(change.new)}"


def cli_words(exc: RunSettingsMismatch) -> str:
    """The mismatch as a ``dreads`` user types it: ``--mode isolated -> joint`` (a setting
    with no option keeps its field name). The ``DREADS_*`` variables set only a new run's
    settings, so an existing run's mismatch always comes from an option."""
    def describe(change: SettingChange) -> str:
        names = SETTING_NAMES.get(change.name)
        return _change(names.option if names else change.name, change)

    return exc.worded(describe)


def api_words(exc: RunSettingsMismatch) -> str:
    """The mismatch as an API client sent it: ``mode: isolated -> joint`` (a setting that is
    the server's own, not a parameter: ``canvas_length (the server's): 320 -> 640``)."""
    def describe(change: SettingChange) -> str:
        names = SETTING_NAMES.get(change.name)
        if names is None:
            return _change(f"{change.name}:", change)
        param = names.param or f"{change.name} (the server's)"
        return _change(f"{param}:", change)

    return exc.worded(describe)
