"""A run's publisher in a process of its own, for ``dreads submit``.

A million-decision submit publishes 15,625 chunk messages. Celery and kombu spend about a
millisecond of Python on each, and in the submitting process that time would share one
interpreter lock with parsing the file and writing the rows: the two would take turns instead
of running side by side. ``PublisherProcess`` is the same ``app.runs.submit.Publisher`` as
``app.broker.publish.RunPublisher``, running in a child process: submit's publishing thread
sends it a committed batch's ids over a pipe and waits (without the lock) for the number of
messages, or for the broker's error.

    with PublisherProcess(broker, chunk_size) as publisher:   # the child starts now
        ...                                                   # (load the tokenizer meanwhile)
        publisher.bind(run_name="r1", queue=queue)
        submit_job(request, factory, tokenizer, publisher=publisher)

The child is spawned at once and imports Celery and kombu while the parent does its own
start-up (the tokenizer, the upstream's probe), so its first message is not late.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
from array import array
from collections.abc import Sequence
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from app.broker.publish import RunPublisher
from app.errors import DreadsError, PublishError

__all__ = ["PublisherProcess"]

#: How long closing waits for the child to finish its last message before it is stopped.
_CLOSE_S = 30.0


class PublisherProcess:
    """``RunPublisher`` over the send-only client of ``broker`` (default
    ``DREADS_BROKER_URL``) in a spawned child process, ``chunk_size`` decisions a message
    (default ``DREADS_CHUNK_SIZE``); ``bind`` names the run and its queue before the first
    ``start``."""

    def __init__(self, broker: str | None, chunk_size: int | None) -> None:
        context = multiprocessing.get_context("spawn")  # no fork of a threaded parent
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, broker, chunk_size),
                                        name="dreads-publish", daemon=True)
        self._process.start()
        child.close()
        self._bound: tuple[str, str] | None = None

    def bind(self, *, run_name: str, queue: str) -> None:
        """The run whose chunks this publishes, and their queue (sent with ``start``)."""
        self._bound = (run_name, queue)

    def start(self, now_s: float) -> None:
        if self._bound is None:
            raise RuntimeError("PublisherProcess.bind(run_name=..., queue=...) first")
        self._ask(("start", now_s, *self._bound))

    def __call__(self, run_id: int, decision_ids: Sequence[int]) -> int:
        return int(self._ask(("publish", run_id, array("q", decision_ids).tobytes())))

    def _ask(self, request: tuple[Any, ...]) -> Any:
        try:
            self._conn.send(request)
            kind, value = self._conn.recv()
        except (EOFError, OSError) as exc:
            raise PublishError(
                "the publishing process ended unexpectedly; the decisions stay in SQL and the "
                "sweeper (or `dreads resume`) publishes them") from exc
        if kind == "error":
            raise PublishError(value)
        return value

    def close(self) -> None:
        with contextlib.suppress(OSError):  # the child is gone already
            self._conn.send(None)
        self._process.join(_CLOSE_S)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join()
        self._conn.close()

    def __enter__(self) -> PublisherProcess:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _serve(conn: Connection, broker: str | None, chunk_size: int | None) -> None:
    """The child: answer each request with ("ok", value) or ("error", message) until None.
    Ctrl-C is the parent's to handle: it closes the pipe, and the child ends with it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _publish_requests(conn, broker, chunk_size)
    except Exception as exc:  # never a traceback: the parent reports it, rows stay in SQL
        message = f"the publishing process failed ({type(exc).__name__}: {exc})"
        while _receive(conn) is not None:
            conn.send(("error", message))
    conn.close()


def _publish_requests(conn: Connection, broker: str | None, chunk_size: int | None) -> None:
    """The child's entry point: like every process's, it reads ``DREADS_*`` (it was spawned
    with the parent's environment)."""
    from app.broker.client import make_sender
    from app.config import get_settings

    settings = get_settings()
    with make_sender(settings, broker) as sender:
        publisher = None
        while (request := _receive(conn)) is not None:
            try:
                if request[0] == "start":
                    _, now_s, run_name, queue = request
                    publisher = RunPublisher(sender, chunk_size or settings.chunk_size,
                                             run_name=run_name, queue=queue)
                    publisher.start(now_s)
                    conn.send(("ok", None))
                else:
                    assert publisher is not None, "start comes first"
                    ids = array("q")
                    ids.frombytes(request[2])
                    conn.send(("ok", publisher(request[1], ids)))
            except DreadsError as exc:
                conn.send(("error", exc.message))


def _receive(conn: Connection) -> tuple[Any, ...] | None:
    try:
        request: tuple[Any, ...] | None = conn.recv()
    except EOFError:  # the parent is gone
        return None
    return request
