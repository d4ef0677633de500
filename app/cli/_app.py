"""The Typer application every command module registers on, and the help panels."""

from __future__ import annotations

from typing import Annotated

import typer

from app.cli._typer import DreadsTyper

__all__ = ["INSPECT", "RUN_JOBS", "SERVERS", "SETUP", "app"]

#: Command panels of ``dreads --help``, in the order a user meets them.
RUN_JOBS = "Run jobs"
INSPECT = "Look at runs"
SERVERS = "Servers and workers"
SETUP = "Set up"

app = DreadsTyper(
    name="dreads",
    help=(
        "Durable evaluations of diffusion reads: typed yes/no, choice and score decisions "
        "from a diffusion LLM served by vLLM, with every answer and failure kept in SQL.\n\n"
        "Try it: [bold]dreads run examples/contracts.jsonl --upstream sim[/bold], then "
        "[bold]dreads report contracts --html report.html[/bold]. Every option also reads "
        "its DREADS_* environment variable (see the README)."
    ),
    no_args_is_help=True,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dreads {version('dreads')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Show the version and exit.")]
    = False,
) -> None:
    """Durable evaluations of diffusion reads."""
