"""``dreads`` command line. One module per command (or pair of commands), named after it; each
registers on ``_app.app``. Exit statuses are ``app.errors``' ``EXIT_*``.

Importing this package is cheap: the command modules import only Typer, Rich and the pure
engine at module level, and the rest (SQLAlchemy, Celery, FastAPI, scikit-learn, matplotlib,
torch, transformers) inside the commands that use it.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading

#: Start-up creates a few hundred thousand objects that live until the command ends (modules,
#: classes, SQLAlchemy's and Typer's tables); the cyclic garbage collector would walk them
#: again and again, a tenth of a short command's run. It waits this long, then runs as usual.
_GC_PAUSE_S = 1.0


_gc_pause: list[threading.Timer] = []


def _pause_gc() -> None:
    if gc.isenabled():
        gc.disable()
        resume = threading.Timer(_GC_PAUSE_S, gc.enable)
        resume.daemon = True
        resume.start()
        _gc_pause.append(resume)


def keep_gc_off() -> None:
    """For a command that runs without the cyclic collector (``submit``): the start-up
    pause no longer ends by turning it back on."""
    for timer in _gc_pause:
        timer.cancel()
    gc.disable()


_pause_gc()

from app.connect.plugins import load_plugins  # noqa: E402
from app.errors import ConfigError  # noqa: E402

try:  # installed question kinds and sources, before the commands list what they take
    load_plugins()
except ConfigError as _broken:  # one broken plugin does not stop every command
    print(f"warning: {_broken.message}; its kinds and sources are not available",
          file=sys.stderr)

from app.cli._app import app  # noqa: E402
from app.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, DreadsError  # noqa: E402

__all__ = ["app", "keep_gc_off", "main", "run_app"]

# Command modules register their commands on import (one line per module).
# isort: off
from app.cli import run, submit, status, resume, cancel, export  # noqa: F401, E402
from app.cli import report  # noqa: F401, E402
from app.cli import sim, check_upstream, decide, worker, flower, serve  # noqa: F401, E402
from app.cli import db, engine  # noqa: F401, E402
# isort: on


def main() -> None:
    """The ``dreads`` entry point: the app, with a last line of defence, so that a user never
    sees a traceback (``DREADS_DEBUG=1`` shows it), and a quick exit."""
    from app.upstream.log_redaction import redact_logs

    redact_logs()
    atexit.register(_exit_now)
    try:
        run_app()
    except SystemExit as exc:
        _exit_code[0] = _code_of(exc)
        raise
    except BaseException:  # DREADS_DEBUG's traceback: Python prints it, then exits 1
        _exit_code[0] = EXIT_FAILURE
        raise


#: The status ``_exit_now`` exits with (set by ``main``).
_exit_code = [EXIT_OK]


def _code_of(exc: SystemExit) -> int:
    if exc.code is None:
        return EXIT_OK
    if isinstance(exc.code, int):
        return exc.code
    return EXIT_FAILURE  # a message: Python prints it to stderr


def _exit_now() -> None:
    """The last exit handler (registered first, so run after every other one): flush and end
    the process without tearing down the interpreter. What a command opens it closes itself
    (files, database engines, child processes); the teardown would only free every module
    and object of Typer, Rich and SQLAlchemy one by one, a quarter of a short command's
    time."""
    if "logging" in sys.modules:
        sys.modules["logging"].shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say
            stream.flush()
    os._exit(_exit_code[0])


def run_app(args: list[str] | None = None) -> None:
    """The app (on ``args``, else the command line) with ``main``'s last line of defence, and
    without its quick exit: a test runs a command in-process as a user meets it. Ends in
    ``SystemExit``."""
    try:
        if args is None:
            app()
        else:
            app(args=args, prog_name="dreads")
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    except DreadsError as exc:  # one a command did not catch: its message and exit status
        if os.environ.get("DREADS_DEBUG"):
            raise
        print(f"error: {exc.message}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except Exception as exc:
        if os.environ.get("DREADS_DEBUG"):
            raise
        print(f"error: {_describe(exc)}", file=sys.stderr)
        sys.exit(EXIT_FAILURE)


def _describe(exc: Exception) -> str:
    """One line about an error no command turned into a message of its own."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    first = (str(exc).strip().splitlines() or [""])[0]
    return (f"unexpected {type(exc).__name__}: {first} (a bug in dreads: please report it "
            "with the command you ran; DREADS_DEBUG=1 shows the traceback)")
