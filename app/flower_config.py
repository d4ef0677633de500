"""Who may open Flower: the basic-auth policy of ``dreads flower``.

Flower can revoke tasks and shut workers down, so it never starts open by accident:

- credentials (``user:password``, several separated by commas) come from ``--basic-auth`` or
  ``DREADS_FLOWER_BASIC_AUTH``; without them it refuses to start, unless ``--insecure`` is given
  AND it listens on a loopback address only;
- placeholder passwords (``changethis``, ``admin:admin``, a password equal to the user name)
  are refused, except with ``--insecure`` (a developer's own machine).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from app.errors import ConfigError

__all__ = ["PLACEHOLDER_PASSWORDS", "FlowerAuth", "is_loopback", "resolve_flower_auth"]

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


def _refuse_placeholder(credential: str) -> None:
    user, _, password = credential.partition(":")
    if password.lower() in PLACEHOLDER_PASSWORDS or password == user:
        raise ConfigError(f"the Flower password of user {user!r} is a placeholder; choose a real "
                          "one in --basic-auth / DREADS_FLOWER_BASIC_AUTH (FLOWER_BASIC_AUTH in "
                          ".env for docker compose), or pass --insecure on your own machine")
