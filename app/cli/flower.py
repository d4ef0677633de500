"""``dreads flower``: Flower for the dreads Celery app, with basic authentication on.

Flower runs in this process (``celery -A workers.celery_app flower``), so the credentials never
appear on a process command line. Tasks show as ``reads.run_chunk`` with the arguments
``run=<name> chunk=<first>..<last> n=<count>`` (the publisher's ``argsrepr``). Flower only
knows what it saw while running; ``dreads status`` has the numbers from SQL.

Flower can revoke tasks and shut workers down, so it never starts open by accident:

- credentials (``user:password``, several separated by commas) come from ``--basic-auth`` or
  ``DREADS_FLOWER_BASIC_AUTH``; without them it refuses to start, unless ``--insecure`` is given
  AND it listens on a loopback address only;
- placeholder passwords (``changethis``, ``admin:admin``, a password equal to the user name)
  are refused, except with ``--insecure`` (a developer's own machine).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from typing import Annotated

import typer

from app.cli._app import SERVERS, app
from app.cli.options import err_console, exit_error
from app.errors import ConfigError

__all__ = ["MIN_SECRET_CHARS", "PLACEHOLDER_PASSWORDS", "FlowerAuth", "flower", "flower_argv",
           "is_loopback", "resolve_flower_auth"]

#: The fewest characters of an API key or a Flower password when listening beyond loopback.
MIN_SECRET_CHARS = 16

#: Passwords that only ever appear in examples and defaults.
PLACEHOLDER_PASSWORDS = frozenset({
    "admin", "change-me", "change_me", "change_this", "changeit", "changeme", "changethis",
    "default", "flower", "pass", "passw0rd", "password", "secret", "test", "1234", "12345",
    "123456", "12345678",
})

_HOW = ("pass --basic-auth user:password or set DREADS_FLOWER_BASIC_AUTH=user:password "
        "(several: user1:pw1,user2:pw2)")


@dataclass(frozen=True)
class FlowerAuth:
    """The checked credentials Flower gets (empty: no authentication, loopback only)."""

    credentials: tuple[str, ...]

    @property
    def enabled(self) -> bool:
        return bool(self.credentials)

    @property
    def users(self) -> tuple[str, ...]:
        return tuple(c.split(":", 1)[0] for c in self.credentials)


def is_loopback(address: str) -> bool:
    """True for ``localhost`` and loopback IPs (127.0.0.0/8, ::1); False for 0.0.0.0 or ''."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[] ")).is_loopback
    except ValueError:
        return False


def resolve_flower_auth(basic_auth: str | None, *, address: str, insecure: bool) -> FlowerAuth:
    """Check the credentials against the policy above.

    Raises:
        ConfigError: no credentials (and not ``--insecure`` on loopback), a malformed
            ``user:password``, or a placeholder password outside ``--insecure``.
    """
    raw = (basic_auth or "").strip()
    if not raw:
        return _no_credentials(address=address, insecure=insecure)
    credentials = tuple(_parse_credential(part) for part in raw.split(","))
    if not insecure:
        for credential in credentials:
            _refuse_placeholder(credential)
    if not is_loopback(address):  # --insecure or not: reachable from other machines
        for credential in credentials:
            _refuse_short(credential, address)
    return FlowerAuth(credentials)


def _no_credentials(*, address: str, insecure: bool) -> FlowerAuth:
    if not insecure:
        raise ConfigError(f"Flower needs credentials: {_HOW}. (--insecure starts it without "
                          "authentication, on a loopback address such as 127.0.0.1 only.)")
    if not is_loopback(address):
        raise ConfigError(f"--insecure is only allowed on a loopback address, not {address!r}: "
                          f"use --address 127.0.0.1, or {_HOW}")
    return FlowerAuth(())


def _parse_credential(part: str) -> str:
    user, sep, password = part.strip().partition(":")
    if not sep or not user or not password:
        raise ConfigError(f"Flower credentials must look like user:password, got {part.strip()!r}"
                          " (several: user1:pw1,user2:pw2)")
    return f"{user}:{password}"


def _refuse_short(credential: str, address: str) -> None:
    user, _, password = credential.partition(":")
    if len(password) < MIN_SECRET_CHARS:
        raise ConfigError(f"the Flower password of user {user!r} has {len(password)} "
                          f"characters; on {address} it needs at least {MIN_SECRET_CHARS}: set "
                          "a long random one (python3 -c \"import secrets; "
                          "print(secrets.token_urlsafe(24))\")")


def _refuse_placeholder(credential: str) -> None:
    user, _, password = credential.partition(":")
    if password.lower() in PLACEHOLDER_PASSWORDS or password == user:
        raise ConfigError(f"the Flower password of user {user!r} is a placeholder; choose a real "
                          "one in --basic-auth / DREADS_FLOWER_BASIC_AUTH (FLOWER_BASIC_AUTH in "
                          ".env for docker compose), or pass --insecure on your own machine")


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
