"""``dreads db upgrade`` / ``dreads db current``: the schema, only ever through Alembic."""

from __future__ import annotations

import typer
from sqlalchemy import make_url

from app.cli._app import app
from app.cli.options import DatabaseOpt, console, database_url, err_console
from app.store.db import make_engine, normalize_url
from app.store.migrate import current_revision, head_revision, upgrade

__all__ = ["db_app"]

db_app = typer.Typer(help="Create or check the database schema (Alembic migrations).",
                     no_args_is_help=True)
app.add_typer(db_app, name="db")


def _redacted(url: str) -> str:
    return make_url(normalize_url(url)).render_as_string(hide_password=True)


@db_app.command("upgrade")
def db_upgrade(database: DatabaseOpt = None) -> None:
    """Create the schema or bring it to the latest revision (safe to repeat)."""
    url = database_url(database)
    try:
        upgrade(url)
    except Exception as exc:  # Alembic/SQLAlchemy errors: the CLI is the edge here
        err_console.print(f"[red]error:[/red] could not upgrade {_redacted(url)}: {exc}; "
                          "check DREADS_DATABASE_URL / --database-url and that the server "
                          "is reachable", highlight=False)
        raise typer.Exit(1) from exc
    console.print(f"schema at revision {head_revision(url)} in {_redacted(url)}",
                  highlight=False)


@db_app.command("current")
def db_current(database: DatabaseOpt = None) -> None:
    """Show the schema revision of the database and the one the code needs (exit 1 if behind)."""
    url = database_url(database)
    engine = make_engine(url)
    try:
        current = current_revision(engine)
    finally:
        engine.dispose()
    head = head_revision(url)
    console.print(f"database: {current or 'no schema'}; code: {head}", highlight=False)
    if current != head:
        err_console.print("run `dreads db upgrade` to bring the schema up to date")
        raise typer.Exit(1)
