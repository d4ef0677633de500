"""The read options are declared once (``app.runs.read_options``): the command line and
``POST /v1/runs`` take them with the table's names, bounds and rules."""

from __future__ import annotations

import typing
from typing import Any

import pytest
import typer.main
from pydantic import ValidationError

from app.api.runs import READ_PARAMS, RunParams
from app.cli import app
from app.engine import PolicyName
from app.runs.read_options import READ_OPTIONS, REPLICATES, read_overrides


def _click_params(command: str) -> dict[str, Any]:
    click_app = typer.main.get_command(app)
    cmd = click_app.commands[command]  # type: ignore[attr-defined]
    return {param.name: param for param in cmd.params if param.name}


@pytest.mark.parametrize("command", ["run", "submit", "resume"])
def test_the_run_commands_take_every_option_with_its_least_value(command: str) -> None:
    params = _click_params(command)
    for option in READ_OPTIONS:
        assert params[option.name].opts[0] == option.option
        assert params[option.name].min == option.minimum, option.name


def test_the_api_takes_the_options_it_declares_with_their_types() -> None:
    hints = typing.get_type_hints(RunParams)
    assert {o.name for o in READ_OPTIONS if o.api} == set(READ_PARAMS)
    for option in READ_OPTIONS:
        if option.api:
            assert hints[option.name] == option.kind | None, option.name


@pytest.mark.parametrize("option", [o for o in (*READ_OPTIONS, REPLICATES)
                                    if o.minimum is not None and (o.api or o is REPLICATES)],
                         ids=lambda o: o.name)
def test_the_api_refuses_what_the_command_line_refuses(option: object) -> None:
    from app.runs.read_options import ReadOption

    assert isinstance(option, ReadOption) and option.minimum is not None
    below = option.minimum - 1 if option.kind is int else option.minimum - 0.5
    with pytest.raises(ValidationError, match=option.name):
        RunParams.model_validate({"run": "r", option.name: below})
    at_least = RunParams.model_validate({"run": "r", option.name: option.minimum})
    assert getattr(at_least, option.name) == option.minimum


def test_draws_alone_implies_the_fixed_policy() -> None:
    assert read_overrides(draws=3) == {"fixed_draws": 3, "policy": PolicyName.FIXED}
    assert read_overrides(draws=3, policy=PolicyName.AGREE) == {
        "fixed_draws": 3, "policy": PolicyName.AGREE}
    assert RunParams.model_validate({"run": "r", "draws": 2}).overrides() == {
        "fixed_draws": 2, "policy": PolicyName.FIXED}


def test_a_name_that_is_no_read_option_is_refused() -> None:
    with pytest.raises(TypeError, match="not read options: colour"):
        read_overrides(colour="red")
