"""What a model server's address must look like: ``sim`` or an http(s) URL with a host.

One rule for every option and variable that names a server (``--upstream``, ``--answer-url``,
``check-upstream URL``, ``DREADS_UPSTREAM``), so a missing ``http://`` is named as such
instead of failing later as an unreachable server.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.engine.types import SIM

__all__ = ["url_problem"]

_SCHEMES = ("http", "https")


def url_problem(value: str, *, name: str, sim: bool = True) -> str | None:
    """Why ``value`` (given as ``name``: an option or a variable) cannot be a server's address,
    in one line that says what to write; None when it can (``sim`` only where ``sim``)."""
    if sim and value == SIM:
        return None
    if "://" not in value:
        return f"{name} {value!r} has no scheme; did you mean http://{value}?"
    parts = urlsplit(value)
    if parts.scheme.lower() not in _SCHEMES:
        return (f"{name} {value!r}: the scheme must be http or https, not {parts.scheme!r} "
                f"(e.g. http://{parts.netloc or 'HOST:PORT'})")
    if not parts.hostname:
        return f"{name} {value!r} has no host; write it as http://HOST:PORT"
    return None
