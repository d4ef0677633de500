"""The names a settings mismatch uses are the ones a user can type: every option of the map
is an option of ``dreads run``, ``submit`` and ``resume``, every parameter one of
``POST /v1/runs``, and every setting those options set is in the map."""

from __future__ import annotations

import typer.main

from app.api.runs import RunParams
from app.cli import app
from app.runs.read_options import read_overrides
from app.runs.setting_names import SETTING_NAMES


def _options(command: str) -> set[str]:
    click_app = typer.main.get_command(app)
    cmd = click_app.commands[command]  # type: ignore[attr-defined]
    return {opt for param in cmd.params for opt in getattr(param, "opts", [])}


def test_every_option_named_is_one_the_run_commands_take() -> None:
    for command in ("run", "submit"):
        options = _options(command)
        assert {n.option for n in SETTING_NAMES.values()} <= options, command
    resume_options = _options("resume")
    assert {n.option for f, n in SETTING_NAMES.items() if f != "replicates"} <= resume_options


def test_every_parameter_named_is_one_of_post_runs() -> None:
    params = set(RunParams.model_fields)
    assert {n.param for n in SETTING_NAMES.values() if n.param} <= params


def test_every_setting_an_option_sets_is_named() -> None:
    every = read_overrides(model="m", tokenizer="t", canvas=1, canvas_step=1, layout="x",
                           mode="x", policy="x", draws=1, threshold=0.1, max_draws=1,
                           steps=1, constrained=True, endpoint="x", seed=1, answer_by="x",
                           answer_url="u", answer_rps=1.0, answer_concurrency=1)
    assert set(every) <= set(SETTING_NAMES)
