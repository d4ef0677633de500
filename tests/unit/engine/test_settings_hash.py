"""ReadSettings <-> dict round trip, validation, and the hash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from app.engine import (
    Endpoint,
    Layout,
    PolicyName,
    ReadMode,
    ReadSettings,
    settings_from_dict,
    settings_hash,
    settings_to_dict,
)
from app.errors import ConfigError

CUSTOM = ReadSettings(model="m", canvas_length=256, layout=Layout.REFERENCE,
                      read_mode=ReadMode.JOINT, policy=PolicyName.FIXED, fixed_draws=3,
                      threshold=0.05, steps=2, constrained=True, endpoint=Endpoint.COMPLETIONS,
                      seed=42)


@pytest.mark.parametrize("settings", [ReadSettings(), CUSTOM])
def test_round_trip_through_json(settings: ReadSettings) -> None:
    data = json.loads(json.dumps(settings_to_dict(settings)))
    back = settings_from_dict(data)
    assert back == settings and isinstance(back.layout, Layout)
    assert settings_hash(back) == settings_hash(settings)


def test_hash_is_hex_sha256_and_changes_with_any_field() -> None:
    h = settings_hash(ReadSettings())
    assert len(h) == 64 and int(h, 16) >= 0
    assert settings_hash(ReadSettings(seed=1)) != h
    assert settings_hash(ReadSettings(threshold=0.2)) != h


def test_missing_keys_take_defaults_and_ints_become_floats() -> None:
    assert settings_from_dict({"threshold": 0}) == ReadSettings(threshold=0.0)


@pytest.mark.parametrize(("data", "needle"), [
    ({"colour": "red"}, "unknown read setting(s) ['colour']"),
    ({"policy": "vote"}, "setting policy='vote' is not one of 'agree', 'entropy', 'fixed'"),
    ({"max_draws": "4"}, "setting max_draws='4' must be an integer"),
    ({"max_draws": True}, "must be an integer"),
    ({"constrained": 1}, "must be true or false"),
    ({"max_draws": 0}, "max_draws must be at least 1"),
    ({"threshold": 1.5}, "threshold must be within [0, 1]"),
    ({"canvas_step": 64, "canvas_length": 32}, "canvas_step 64 exceeds canvas_length 32"),
])
def test_bad_settings_are_config_errors(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_dict(data)
    assert needle in err.value.message
