"""The send-only client: a ``Celery("dreads")`` that knows no task code.

Publishers (submit, the sweeper, the API's queue executor) address ``reads.run_chunk`` by name
(``send_task``) through it, so they import nothing of ``workers/``. Building one opens no
connection: kombu connects on the first publish.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from celery import Celery

from app.broker.config import celery_config
from app.config import Settings

__all__ = ["client_from_config", "make_client", "make_sender"]


def make_client(settings: Settings, *, broker_url: str | None = None) -> Celery:
    """A send-only ``Celery("dreads")`` for ``settings`` (``broker_url`` overrides its broker):
    no task module, not made the current app; close it when done."""
    config = celery_config(settings)
    if broker_url:
        config["broker_url"] = broker_url
    return client_from_config(config)


def client_from_config(config: Mapping[str, Any]) -> Celery:
    """A send-only ``Celery("dreads")`` with ``config`` (``celery_config``'s)."""
    client = Celery("dreads", set_as_current=False)
    client.conf.update(dict(config))
    return client


@contextmanager
def make_sender(settings: Settings, broker_url: str | None = None) -> Iterator[Celery]:
    """``make_client`` closed on exit."""
    client = make_client(settings, broker_url=broker_url)
    try:
        yield client
    finally:
        client.close()
