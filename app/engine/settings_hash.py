"""``ReadSettings`` <-> dict, the hash recorded on a run, and what differs between two.

The dict is JSON-able (enums as their values) and round-trips exactly; unknown keys or values
of the wrong kind are a ``ConfigError``; keys missing from a stored dict take the defaults.

The answer source (``answer_by``, ``answer_url``, and the endpoint budget ``answer_rps``,
``answer_concurrency``) is written only for a run answered by a decision endpoint, so a run
answered by reads keeps the dict and hash it had before answer sources existed. The budget is
recorded but not hashed: it limits how fast answers come, not what they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any, get_type_hints

from app.engine.sources import plans_reads, source_names
from app.engine.types import ReadSettings, ServerFingerprint
from app.errors import ConfigError

__all__ = [
    "ANSWER_FIELDS",
    "BUDGET_FIELDS",
    "SettingChange",
    "changed_batch_invariance",
    "changed_fingerprint",
    "changed_settings",
    "check_settings",
    "settings_from_dict",
    "settings_hash",
    "settings_to_dict",
]

_FIELDS = {f.name: f for f in dataclasses.fields(ReadSettings)}
_TYPES = get_type_hints(ReadSettings)
_KIND_NAMES: dict[Any, str] = {int: "an integer", float: "a number", bool: "true or false",
                               str: "a string"}
_POSITIVE = ("canvas_length", "canvas_step", "max_draws", "steps", "fixed_draws",
             "max_logprob_ids", "joint_max_questions", "answer_concurrency")
#: Written only for a run answered by a decision endpoint.
ANSWER_FIELDS = ("answer_by", "answer_url", "answer_rps", "answer_concurrency")
#: Recorded, not hashed (and ``resume`` may change them).
BUDGET_FIELDS = ("answer_rps", "answer_concurrency")


def settings_to_dict(settings: ReadSettings) -> dict[str, Any]:
    """JSON-able dict of the settings (enums as their values); the answer-source fields only
    when a decision endpoint answers."""
    skip = ANSWER_FIELDS if plans_reads(settings.answer_by) else ()
    return {name: _plain(getattr(settings, name)) for name in _FIELDS if name not in skip}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _coerce(name: str, value: Any) -> Any:
    kind = _TYPES[name]
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in kind)
            raise ConfigError(f"setting {name}={value!r} is not one of {allowed}") from None
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    raise ConfigError(f"setting {name}={value!r} must be {_KIND_NAMES.get(kind, kind)}")


def check_settings(settings: ReadSettings) -> ReadSettings:
    """Reject settings no read can run under.

    Raises:
        ConfigError: names the setting and the allowed range.
    """
    for name in _POSITIVE:
        if getattr(settings, name) < 1:
            raise ConfigError(f"setting {name} must be at least 1, got {getattr(settings, name)}")
    if not 0.0 <= settings.threshold <= 1.0:
        raise ConfigError(f"setting threshold must be within [0, 1], got {settings.threshold}")
    if settings.canvas_step > settings.canvas_length:
        raise ConfigError(f"canvas_step {settings.canvas_step} exceeds canvas_length "
                          f"{settings.canvas_length}")
    return _check_answer_source(settings)


def _check_answer_source(settings: ReadSettings) -> ReadSettings:
    if settings.answer_rps < 0:
        raise ConfigError(f"setting answer_rps must be 0 (no limit) or more, got "
                          f"{settings.answer_rps}")
    if plans_reads(settings.answer_by):
        if settings.answer_url:
            raise ConfigError(f"answer_url {settings.answer_url!r} is for a run answered by a "
                              f"decision endpoint: pass --answer-by {_endpoint_names()}")
        return settings
    if not settings.answer_url:
        raise ConfigError(f"a run answered by {settings.answer_by} needs the endpoint's "
                          "URL (--answer-url)")
    return settings


def _endpoint_names() -> str:
    names = [name for name in source_names() if not plans_reads(name)]
    return ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else "".join(names)


def settings_from_dict(data: dict[str, Any]) -> ReadSettings:
    """Inverse of ``settings_to_dict``.

    Raises:
        ConfigError: an unknown key, a value of the wrong kind, or an impossible value.
    """
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"unknown read setting(s) {unknown}; known: {sorted(_FIELDS)}")
    values = {name: _coerce(name, value) for name, value in data.items()}
    return check_settings(ReadSettings(**values))


def settings_hash(settings: ReadSettings) -> str:
    """sha256 hex of the canonical JSON of the settings (sorted keys, no spaces), the
    endpoint budget left out."""
    hashed = {k: v for k, v in settings_to_dict(settings).items() if k not in BUDGET_FIELDS}
    text = json.dumps(hashed, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class SettingChange:
    """One setting that differs between two settings dicts."""

    name: str
    old: Any
    new: Any

    @property
    def is_budget(self) -> bool:
        """An endpoint budget (``BUDGET_FIELDS``): a run may change it when it resumes."""
        return self.name in BUDGET_FIELDS

    def __str__(self) -> str:
        return f"{self.name}: {self.old!r} -> {self.new!r}"


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[SettingChange]:
    """The settings that differ between two settings dicts (``settings_to_dict``), by name."""
    names = sorted(set(old) | set(new))
    return [SettingChange(n, old.get(n), new.get(n)) for n in names if old.get(n) != new.get(n)]


#: What makes a run's earlier answers incomparable with a server's: its model and its canvas.
_SERVER_IDENTITY = ("model_id", "canvas_length")


def changed_fingerprint(old: Mapping[str, Any] | None,
                        new: ServerFingerprint) -> list[SettingChange]:
    """How ``new`` differs from a run's recorded server fingerprint ``old`` in model id or
    canvas length (nothing when the run has none yet)."""
    if not old:
        return []
    return [SettingChange(n, old.get(n), getattr(new, n)) for n in _SERVER_IDENTITY
            if old.get(n) != getattr(new, n)]


def changed_batch_invariance(old: Mapping[str, Any] | None,
                             new: ServerFingerprint) -> SettingChange | None:
    """Whether ``new`` differs from a run's recorded fingerprint ``old`` in batch invariance
    (None when the run has no fingerprint yet or nothing changed): a run's earlier answers and
    its later ones may then differ by more than their noise."""
    if not old or old.get("batch_invariant") == new.batch_invariant:
        return None
    return SettingChange("batch_invariant", old.get("batch_invariant"), new.batch_invariant)
