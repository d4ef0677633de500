"""The Typer application every command module registers on."""

from __future__ import annotations

import typer

__all__ = ["app"]

app = typer.Typer(
    name="dreads",
    help=(
        "Durable evaluations of diffusion reads: typed yes/no, choice and score decisions "
        "from a diffusion LLM served by vLLM, with every answer and failure kept in SQL."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)
