"""Serve the simulator with uvicorn: in a thread (tests, ``--upstream sim``) or in the foreground.

``start_sim_thread(options)`` binds the port at once (0 = a free one), so ``handle.url`` is known
before it answers; with ``down_for_s`` the socket stays bound but not listening, so clients get
"connection refused" until then, like a vLLM still loading. Mid-run outages: ``handle.down(s)``
(or ``POST /sim/down?seconds=s``) answers 503 on every model route; ``handle.up()`` ends it.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from app.sim.app import SimApp, create_app
from app.sim.key import AnswerKey
from app.sim.options import SimOptions

__all__ = ["SimHandle", "bind_socket", "run_sim_forever", "start_sim_thread"]

logger = logging.getLogger("dreads.sim")

#: The name of the thread a simulator serves in (``start_sim_thread``).
_THREAD = "dreads-sim"


class _QuietSimThread(logging.Filter):
    """uvicorn logs every server's start and stop on the one ``uvicorn.error`` logger: in a
    process that serves too (``dreads serve --upstream sim``), the simulator's lines would
    read as the server's, twice. Below warnings, this drops those of the simulator's thread."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.threadName != _THREAD


_QUIET = _QuietSimThread()


def bind_socket(host: str, port: int) -> socket.socket:
    """A bound (not yet listening) TCP socket; port 0 picks a free one."""
    # proto IPPROTO_TCP, so asyncio sets TCP_NODELAY on accepted connections (else Nagle plus
    # delayed ACK add 40 ms to every keep-alive request).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _server(app: SimApp) -> uvicorn.Server:
    config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=1, http="auto", loop="auto",
                            backlog=2048)
    return uvicorn.Server(config)


@dataclass
class SimHandle:
    """A simulator serving in a background thread."""

    url: str
    app: SimApp
    _server: uvicorn.Server = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _sock: socket.socket = field(repr=False)

    def stats(self) -> dict[str, Any]:
        return self.app.stats()

    @property
    def bodies(self) -> list[bytes]:
        """The last ``record_bodies`` read request bodies, oldest first."""
        return list(self.app.bodies)

    def down(self, seconds: float = 3600.0) -> None:
        """Answer 503 on every model route for ``seconds``."""
        self.app.faults.down(seconds)

    def up(self) -> None:
        self.app.faults.down(0)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=timeout_s)
        self._sock.close()

    def __enter__(self) -> SimHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_sim_thread(options: SimOptions | None = None, *, ready_timeout_s: float = 30.0
                     ) -> SimHandle:
    """Start a simulator in a daemon thread; return once it listens (or at once with
    ``down_for_s``, when it refuses connections until then)."""
    options = options or SimOptions()
    app = create_app(options)
    sock = bind_socket(options.host, options.port)
    server = _server(app)

    def _serve() -> None:
        if options.down_for_s > 0:
            time.sleep(options.down_for_s)
        server.run(sockets=[sock])

    logging.getLogger("uvicorn.error").addFilter(_QUIET)  # the same filter once, however often
    thread = threading.Thread(target=_serve, name=_THREAD, daemon=True)
    thread.start()
    host, port = sock.getsockname()[:2]
    handle = SimHandle(f"http://{host}:{port}", app, server, thread, sock)
    if options.down_for_s <= 0:
        _wait_started(server, thread, ready_timeout_s)
    return handle


def _wait_started(server: uvicorn.Server, thread: threading.Thread, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("dreads sim did not start; see the log above")
        time.sleep(0.01)


def _say_key(key: AnswerKey | None, path: str | None) -> None:
    """What the answer key was read against, and what of it matches nothing there."""
    if key is None:
        return
    if key.job_file is None:
        logger.info("[dreads sim] answer key %s: %d line(s), not checked: no job file beside "
                    "it (X.jsonl for X.key.jsonl)", path, len(key.labels))
        return
    logger.info("[dreads sim] answer key %s: %d line(s), read against %s", path,
                len(key.labels), key.job_file)
    for warning in key.warnings:
        logger.warning("warning: %s", warning)


def run_sim_forever(options: SimOptions) -> None:
    """Serve in the foreground until interrupted (``dreads sim``)."""
    app = create_app(options)
    _say_key(app.answer_key, options.key_path)
    sock = bind_socket(options.host, options.port)
    host, port = sock.getsockname()[:2]
    if options.down_for_s > 0:
        logger.info("[dreads sim] refusing connections for %.1fs (--down-for)",
                    options.down_for_s)
        time.sleep(options.down_for_s)
    logger.info("[dreads sim] SIMULATOR serving model %r (canvas %d) on http://%s:%d",
                options.model, options.canvas_length, host, port)
    try:
        _server(app).run(sockets=[sock])
    finally:
        sock.close()
