"""``dreads cancel`` and ``dreads delete``: a run stopped, or removed with its rows."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli import _render as render
from app.cli._app import RUN_JOBS, app
from app.cli._store import store_session
from app.cli.options import (
    DatabaseOpt,
    JsonOpt,
    RunArg,
    cli_errors,
    console,
    database_url,
    err_console,
    opened_store,
)
from app.errors import EXIT_OK, InputError

if TYPE_CHECKING:
    pass

log = logging.getLogger("dreads.cli")


__all__ = ["cancel", "delete"]


@app.command(rich_help_panel=RUN_JOBS)
def cancel(run: RunArg, json_out: JsonOpt = False, database: DatabaseOpt = None) -> None:
    """Cancel a run: no worker starts its decisions; those in flight finish. A finished or
    cancelled run is left as it is."""
    from app.store.admin import cancel_run
    from app.store.runs import require_run

    with cli_errors(), store_session(database) as session:
        info = require_run(session, run)
        outcome = cancel_run(session, info.id)
    if json_out:
        console.print_json(render.json_text({"run": run, **outcome.as_dict()}))
        return
    for line in render.cancel_lines(run, outcome):
        console.print(line, highlight=False, markup=False)


@app.command(rich_help_panel=RUN_JOBS)
def delete(
    run: RunArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]
    = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Delete even while workers hold some of its decisions.")] = False,
    database: DatabaseOpt = None,
) -> None:
    """Delete a run with its decisions, answers, draws and attempts (asks first)."""
    from app.store.admin import delete_run, run_contents
    from app.store.db import session_scope
    from app.store.runs import require_run

    with cli_errors(), opened_store(database_url(database)) as factory:
        with session_scope(factory) as session:
            info = require_run(session, run)
            contents = run_contents(session, info.id)
        _check_deletable(run, contents.in_flight, force=force)
        what = (f"run {run!r}: {contents.decisions} decision(s), {contents.answers} "
                f"answer(s), {contents.draws} draw(s), {contents.attempts} attempt(s)")
        _confirm(f"delete {what}? This cannot be undone.", yes=yes)
        with session_scope(factory) as session:
            delete_run(session, info.id)
    console.print(f"deleted {what}", highlight=False, markup=False)


def _check_deletable(run: str, in_flight: int, *, force: bool) -> None:
    if in_flight and not force:
        raise InputError(f"{in_flight} decision(s) of run {run!r} are in flight on workers; "
                         f"`dreads cancel {run}`, let them finish, then delete (or pass "
                         "--force)")


def _confirm(question: str, *, yes: bool) -> None:
    """Ask ``question`` on a terminal; refuse to guess when no one can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise InputError("not deleting without confirmation: pass --yes to delete from a "
                         "script")
    if not typer.confirm(question, default=False, err=True):
        err_console.print("nothing deleted")
        raise typer.Exit(EXIT_OK)
