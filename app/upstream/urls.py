"""What a model server's address must look like: ``sim`` or an http(s) URL with a host.

One rule for every option and variable that names a server (``--upstream``, ``--answer-url``,
``check-upstream URL``, ``DREADS_UPSTREAM``), so a missing ``http://`` is named as such
instead of failing later as an unreachable server.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from app.engine.types import SIM

__all__ = ["key_for", "same_server", "server_of", "url_problem"]

_SCHEMES = ("http", "https")


def url_problem(value: str, *, name: str, sim: bool = True) -> str | None:
    """Why ``value`` (given as ``name``: an option or a variable) cannot be a server's address,
    in one line that says what to write; None when it can (``sim`` only where ``sim``)."""
    if sim and value == SIM:
        return None
    if "://" not in value:
        return f"{name} {value!r} has no scheme; did you mean http://{value}?"
    try:
        parts = urlsplit(value)
        _ = parts.port  # a port that is not a number raises here
    except ValueError as exc:
        return f"{name} {value[:200]!r} is not a URL ({exc}); write it as http://HOST:PORT"
    if parts.scheme.lower() not in _SCHEMES:
        return (f"{name} {value!r}: the scheme must be http or https, not {parts.scheme!r} "
                f"(e.g. http://{parts.netloc or 'HOST:PORT'})")
    if not parts.hostname:
        return f"{name} {value!r} has no host; write it as http://HOST:PORT"
    return None


def server_of(url: str) -> tuple[str, str, int] | str:
    """Which server ``url`` names: (scheme, host, port), the user part and the path aside; a
    value that is not an http(s) URL (``sim``) stands for itself."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:  # not a URL (``http://[x``, a port that is not a number)
        return url.strip()
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES or not parts.hostname:
        return url.strip()
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def same_server(url: str, other: str) -> bool:
    """Whether ``url`` and ``other`` name one server (scheme, host and port; ``http://h:80/v1``
    and ``http://H/`` do): a key configured for one may go to the other."""
    return server_of(url) == server_of(other)


def key_for(url: str, *, key: str | None, key_url: str | None) -> str | None:
    """``key`` when ``url`` is on the server it was configured for (``key_url``), else None:
    an operator's key never goes to a server a run or a client names."""
    if not key or not key_url:
        return None
    return key if same_server(url, key_url) else None
