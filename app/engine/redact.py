"""Credentials out of URLs: ``redact_url`` for anything shown, ``without_credentials`` for
anything stored.

A URL may carry a secret two ways: a password in its user part
(``http://admin:PASSWORD@host``, ``redis://:PASSWORD@host``) and a query parameter
(``postgresql://host/db?password=PASSWORD``, ``?token=``, ``?api_key=``). Every page, log line,
metric label, API answer and error message that shows a URL shows ``redact_url`` of it (or of
the whole message: it finds the URLs in any text); a URL written to the store is written
``without_credentials``, and the credentials are taken from the environment when it is used.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["MASK", "SECRET_PARAMS", "redact_url", "redacted_values", "without_credentials"]

MASK = "***"  #: what a secret is shown as

#: Query parameters whose value is a secret (compared lower-case).
SECRET_PARAMS = frozenset({
    "access_token", "api-key", "api_key", "apikey", "auth", "client_secret", "key", "pass",
    "passwd", "password", "pwd", "secret", "sslpassword", "token",
})

#: ``scheme://user:password@``: the password ends at the last ``@`` before the path.
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]*):[^\s/?#]*@")
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:" + "|".join(re.escape(p) for p in sorted(SECRET_PARAMS)) + r")=)"
    r"[^&#\s'\"]*", re.IGNORECASE)


def redact_url(text: str) -> str:
    """``text`` (a URL, or any message holding URLs) with every URL's password and secret
    query values shown as ``***``; the rest (scheme, user, host, port, path) as written.

    >>> redact_url("http://admin:PASSWORD@vllm:8000/v1?token=T&x=1")
    'http://admin:***@vllm:8000/v1?token=***&x=1'
    """
    text = _USERINFO.sub(rf"\g<head>:{MASK}@", text)
    return _QUERY_SECRET.sub(rf"\g<head>{MASK}", text)


def without_credentials(url: str) -> str:
    """``url`` with no user part and no secret query parameter: what is stored of it (the
    credentials are the environment's, given again where the URL is used). A value that is not
    a URL (``sim``, a model path) is returned as it is.

    >>> without_credentials("http://admin:PASSWORD@vllm:8000/v1?password=P&x=1")
    'http://vllm:8000/v1?x=1'
    """
    if "://" not in url:
        return url
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True)
                if k.lower() not in SECRET_PARAMS]
        query = urlencode(kept)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redacted_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """``values`` (a run's settings) with ``redact_url`` applied to each text value, for
    showing."""
    return {key: redact_url(value) if isinstance(value, str) else value
            for key, value in values.items()}
