"""``dreads flower``: Flower for the dreads Celery app, with basic authentication on.

Flower runs in this process (``celery -A workers.celery_app flower``), so the credentials never
appear on a process command line. Tasks show as ``reads.run_chunk`` with the arguments
``run=<name> chunk=<first>..<last> n=<count>`` (the producer's ``argsrepr``). Flower only knows
what it saw while running; ``dreads status`` has the numbers from SQL.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from app.cli._app import SERVERS, app
from app.cli.options import err_console, exit_error
from app.errors import ConfigError
from app.flower_config import FlowerAuth, resolve_flower_auth

__all__ = ["flower", "flower_argv"]

#: Celery's ``-A``: the module holding the dreads Celery app.
CELERY_APP = "workers.celery_app"


def flower_argv(*, broker: str, port: int, address: str, auth: FlowerAuth,
                extra: list[str]) -> list[str]:
    """The ``celery`` command line (without the program name) that starts Flower."""
    argv = ["-A", CELERY_APP, "--broker", broker, "flower", f"--port={port}",
            f"--address={address}"]
    if auth.enabled:
        argv.append("--basic-auth=" + ",".join(auth.credentials))
    return argv + extra


def _check_extra(extra: list[str]) -> list[str]:
    for arg in extra:
        if "auth" in arg.lower():
            raise ConfigError(f"{arg!r}: authentication is set by --basic-auth / "
                              "DREADS_FLOWER_BASIC_AUTH only")
    return extra


def _start(argv: list[str]) -> None:
    from celery.bin.celery import celery as celery_cli

    celery_cli.main(args=argv, prog_name="dreads flower", standalone_mode=False)


@app.command(
    "flower",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    rich_help_panel=SERVERS,
)
def flower(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on.")] = 5555,
    address: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    basic_auth: Annotated[str | None, typer.Option(
        "--basic-auth", help="user:password (several: u1:p1,u2:p2). Default: "
        "DREADS_FLOWER_BASIC_AUTH.", show_default=False)] = None,
    insecure: Annotated[bool, typer.Option(
        "--insecure", help="Allow no credentials or a placeholder password; without "
        "credentials only on a loopback address.")] = False,
    broker: Annotated[str | None, typer.Option(
        help="Broker URL. Default: DREADS_BROKER_URL.", show_default=False)] = None,
) -> None:
    """Start Flower (monitoring) for the dreads workers, with basic authentication.

    Further Flower options are passed through, e.g. ``--url_prefix=flower``.
    """
    from app.config import get_settings

    settings = get_settings()
    try:
        auth = resolve_flower_auth(basic_auth or settings.flower_basic_auth,
                                   address=address, insecure=insecure)
        extra = _check_extra(list(ctx.args))
    except ConfigError as exc:
        exit_error(exc, 2)
    if not auth.enabled:
        err_console.print(f"[yellow]warning:[/yellow] Flower runs WITHOUT authentication on "
                          f"{address}:{port} (--insecure)", highlight=False)
        os.environ["FLOWER_UNAUTHENTICATED_API"] = "true"
    _start(flower_argv(broker=broker or settings.broker_url, port=port, address=address,
                       auth=auth, extra=extra))
