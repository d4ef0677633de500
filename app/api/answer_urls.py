"""Which decision endpoints a run submitted over HTTP may be answered by: the operator's only.

``answer_url`` on ``POST /v1/runs`` (and ``resume``) names a server this process, or its
workers, will send every decision of the run to, with ``DREADS_ANSWER_API_KEY`` where the key
is that server's. A client may therefore only name a server the operator configured: this
server's upstream, ``DREADS_ANSWER_URL`` or one of ``DREADS_ANSWER_URLS`` (compared by scheme,
host and port). Anything else is a 400 that lists what is accepted, before the body is read.
"""

from __future__ import annotations

from app.api.config import ServeConfig
from app.api.errors import api_error
from app.engine import redact_url
from app.upstream.urls import same_server

__all__ = ["accepted_answer_urls", "check_answer_url"]


def accepted_answer_urls(config: ServeConfig) -> tuple[str, ...]:
    """The servers a client may name as ``answer_url``: the upstream first."""
    return (config.upstream, *config.answer_urls)


def check_answer_url(value: str | None, config: ServeConfig) -> None:
    """Refuse an ``answer_url`` the operator did not configure (None: not given, the default).

    Raises:
        HTTPException: 400 naming the accepted servers and the setting that adds one.
    """
    if value is None:
        return
    accepted = accepted_answer_urls(config)
    if any(same_server(value, url) for url in accepted):
        return
    said = ", ".join(redact_url(url) for url in accepted)
    raise api_error(400, "invalid_request_error",
                    f"answer_url {redact_url(value)[:200]!r} is not a decision endpoint of this "
                    f"server (it accepts {said}); leave answer_url out, or ask the operator "
                    "to add it to DREADS_ANSWER_URLS")
