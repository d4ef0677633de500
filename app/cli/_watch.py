"""``dreads status --watch``: the status view refreshed in place on a terminal; elsewhere (a
file, a pipe) one summary line per interval, as ``watch``-like tools print.

Both stop when the run has ended (``states.has_ended``: exit 0), when it is paused (exit 1,
with the reason: it waits for ``resume``), or on Ctrl-C (exit 130).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

import typer

from app.cli import _render as render
from app.cli.options import console, err_console
from app.errors import EXIT_FAILURE, EXIT_INTERRUPTED

if TYPE_CHECKING:
    from app.store.status_sql import RunStatusReport

__all__ = ["PAUSED_EXIT", "status_line", "watch"]

#: Exit status of a watch that found the run paused (it waits for ``resume``).
PAUSED_EXIT = EXIT_FAILURE

Load = Callable[[], "RunStatusReport"]


def watch(load: Load, interval_s: float) -> None:
    """Show ``load()``'s report every ``interval_s`` until the run has ended or is paused."""
    try:
        report = _live(load, interval_s) if console.is_terminal else _lines(load, interval_s)
    except KeyboardInterrupt:
        err_console.print("stopped watching; the run goes on")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if report is not None and report.pause is not None:
        err_console.print(f"run {report.run.name} paused: {report.pause['reason']}",
                          highlight=False, markup=False)
        raise typer.Exit(PAUSED_EXIT)


def _stops(report: RunStatusReport) -> bool:
    return report.ended or report.pause is not None


def _live(load: Load, interval_s: float) -> RunStatusReport:
    from rich.live import Live

    report = load()
    with Live(render.status_view(report), console=console, auto_refresh=False) as live:
        while not _stops(report):
            time.sleep(interval_s)
            report = load()
            live.update(render.status_view(report), refresh=True)
    return report


def _lines(load: Load, interval_s: float) -> RunStatusReport | None:
    """One line per interval, each flushed at once; a reader that goes away ends it."""
    try:
        while True:
            report = load()
            sys.stdout.write(status_line(report, datetime.now().astimezone()) + "\n")
            sys.stdout.flush()
            if _stops(report):
                return report
            time.sleep(interval_s)
    except BrokenPipeError:
        _drop_stdout()
        return None


def status_line(report: RunStatusReport, now: datetime) -> str:
    """``2026-12-01 12:00:03 contracts active: done 864/1056, failed 0, unanswered 0,
    185.11/s, ETA 0m01s``."""
    counts = report.counts
    return (f"{now:%Y-%m-%d %H:%M:%S} {report.run.name} {report.state.value}: "
            f"done {counts.get('done', 0)}/{report.total}, failed {counts.get('failed', 0)}, "
            f"unanswered {report.unanswered}, {report.rate_per_s:.2f}/s, "
            f"ETA {render.duration(report.eta_s)}")


def _drop_stdout() -> None:
    """The reader of the pipe left (``| head``): nothing more to write, and nothing to flush
    at exit either."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
