"""``dreads db upgrade`` / ``dreads db current``: the schema, only ever through Alembic."""

from __future__ import annotations

import typer

from app.cli._app import SETUP, app
from app.cli._typer import DreadsTyper
from app.cli.options import DatabaseOpt, cli_errors, console, database_url, err_console
from app.errors import EXIT_USAGE

__all__ = ["db_app"]

db_app = DreadsTyper(help="Create or check the database schema (Alembic migrations).",
                     no_args_is_help=True)
app.add_typer(db_app, name="db", rich_help_panel=SETUP)


@db_app.command("upgrade")
def db_upgrade(database: DatabaseOpt = None) -> None:
    """Create the schema or bring it to the latest revision (safe to repeat)."""
    from app.store.migrate import head_revision, upgrade
    from app.store.urls import redacted

    url = database_url(database)
    with cli_errors():
        upgrade(url)
    console.print(f"schema at revision {head_revision()} in {redacted(url)}", highlight=False)


@db_app.command("current")
def db_current(database: DatabaseOpt = None) -> None:
    """Show the schema revision of the database ("none" before `dreads db upgrade`) and the one
    the code needs (exit 2 when it is none or behind: every other command refuses it until
    `dreads db upgrade`)."""
    from app.store.db import make_engine
    from app.store.errors import opening_errors
    from app.store.migrate import current_revision, head_revision, require_sqlite_file

    url = database_url(database)
    with cli_errors(), opening_errors(url):
        require_sqlite_file(url)
        engine = make_engine(url)
        try:
            current = current_revision(engine)
        finally:
            engine.dispose()
    head = head_revision()
    console.print(f"database: {current or 'none'}; code: {head}", highlight=False)
    if current is None:
        err_console.print("no dreads schema in this database yet: run `dreads db upgrade` to "
                          "create it", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    if current != head:
        err_console.print("run `dreads db upgrade` to bring the schema up to date")
        raise typer.Exit(EXIT_USAGE)
