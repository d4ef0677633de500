"""No credential in a log line: every record's message passes ``app.engine.redact_url``.

``redact_logs()`` (called by every entry point: the CLI, ``create_app``, the Celery app) wraps
the process's log record factory once, so a URL with a password or a secret query parameter
(an upstream, a database, a broker, a decision endpoint) is shown as ``***`` in dreads' lines
and in those of the libraries it runs (uvicorn, Celery, httpx) alike. The sources redact the
URLs they name too; this is the net under them.
"""

from __future__ import annotations

import logging
from typing import Any

from app.engine import redact_url

__all__ = ["redact_logs"]

_MARK = "_dreads_redacts"


def redact_logs() -> None:
    """Redact every log record made from now on in this process (idempotent)."""
    current = logging.getLogRecordFactory()
    if getattr(current, _MARK, False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed call: logging reports it itself
            return record
        redacted = redact_url(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return record

    setattr(factory, _MARK, True)
    logging.setLogRecordFactory(factory)
