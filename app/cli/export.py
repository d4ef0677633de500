"""``dreads export``: a run's answers as JSONL, CSV or OpenAI batch lines."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import IO, TYPE_CHECKING, Annotated, Any

import typer

from app.cli import _render as render
from app.cli._app import INSPECT, app
from app.cli._files import atomic_output, check_output_path
from app.cli._store import store_session
from app.cli.options import (
    DatabaseOpt,
    RunArg,
    cli_errors,
    err_console,
)
from app.engine import SIMULATOR_LINE
from app.errors import InputError

if TYPE_CHECKING:
    from app.store.csv_export import CsvExport
    from app.store.records import RunInfo
    from app.store.types import Session

log = logging.getLogger("dreads.cli")


__all__ = ["export"]


class ExportFormat(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    OPENAI_BATCH = "openai-batch"


@app.command(rich_help_panel=INSPECT)
def export(
    run: RunArg,
    fmt: Annotated[ExportFormat, typer.Option(
        "--format", help="jsonl, csv, or openai-batch (OpenAI's Batch output lines, each "
        "body a Decision with dreads' diagnostics).")]
    = ExportFormat.JSONL,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", metavar="FILE",
        help="Write to FILE (replaced only once the export succeeded; never a run's job file "
        "or answer key); default stdout.")]
    = None,
    with_state: Annotated[bool, typer.Option(
        "--with-state", help="Add each decision's state text (csv: a 'state' column; jsonl: "
        "a 'state' field, as stored). Off by default: states are most of a run's size.")]
    = False,
    database: DatabaseOpt = None,
) -> None:
    """One line per decision with every answer and diagnostic (streamed from SQL); csv
    columns: docs/commands.md#export."""
    from app.runs.sources import check_not_run_file
    from app.store.runs import require_run
    from app.store.sources import source_files

    with cli_errors():
        if with_state and fmt is ExportFormat.OPENAI_BATCH:
            raise InputError("--with-state is for --format csv or jsonl (an OpenAI Batch "
                             "output line has no state); leave it out or change --format")
        if output is not None:
            check_output_path(output)
        with store_session(database) as session:
            info = require_run(session, run)
            if output is not None and str(output) != "-":
                sources = [path for _, path in source_files(session, run)]
                check_not_run_file(session, output, option="-o",
                                   instead=render.answers_file(run, fmt.value, sources))
            with atomic_output(output, newline="") as out:
                n = _write_export(out, session, info, fmt, with_state=with_state)
            spend_line = _spend_line(session, info)
            partial = _partial_line(session, info)
    if partial:
        err_console.print(partial, style="bold yellow", highlight=False, markup=False)
    if output is not None and str(output) != "-":
        err_console.print(f"exported {n} decision(s) of run {run!r} to {output}",
                          highlight=False, markup=False)
    err_console.print(f"spend of run {run!r}: {spend_line}", highlight=False, markup=False)
    if info.simulator:
        err_console.print(SIMULATOR_LINE, style="bold yellow", highlight=False,
                          markup=False)


def _spend_line(session: Session, info: RunInfo) -> str:
    """What the exported run spent (``status``'s line), for the export's closing message."""
    from app.store.spend import spend_of
    from app.store.views import status_counts

    counts = status_counts(session, info.id)
    return spend_of(session, info.id).line(counts.get("done", 0), sum(counts.values()))


def _partial_line(session: Session, info: RunInfo) -> str:
    """``partial: 64 of 313 decisions settled ...`` while decisions are in flight, else ""."""
    from app.report.figure_text import partial_line
    from app.store.states import OPEN
    from app.store.views import status_counts

    counts = status_counts(session, info.id)
    total = sum(counts.values())
    in_flight = sum(counts.get(str(s.value), 0) for s in OPEN)
    if not in_flight:
        return ""
    return partial_line({"settled": total - in_flight, "decisions": total},
                        then="the export has the answers so far")


def _write_export(out: IO[str], session: Session, info: RunInfo, fmt: ExportFormat, *,
                  with_state: bool) -> int:
    """Write the run in ``fmt``; the number of decisions written."""
    from app.store.views import iter_export

    if fmt is ExportFormat.JSONL:
        return _write_jsonl(out, iter_export(session, info.id, with_state=with_state))
    if fmt is ExportFormat.OPENAI_BATCH:
        from app.store.openai_export import iter_openai_batch

        model = str(info.settings.get("model", ""))
        return _write_jsonl(out, iter_openai_batch(session, info.id, model))
    from app.store.csv_export import csv_export

    return _write_csv(out, csv_export(session, info, with_state=with_state))


def _write_jsonl(out: IO[str], records: Iterator[dict[str, Any]]) -> int:
    import orjson

    n = 0
    for record in records:
        out.write(orjson.dumps(record, default=str).decode() + "\n")
        n += 1
    return n


def _write_csv(out: IO[str], table: CsvExport) -> int:
    """The header, then one row per decision; the number of rows."""
    writer = csv.DictWriter(out, fieldnames=table.columns)
    writer.writeheader()
    n = 0
    for row in table.rows:
        writer.writerow(row)
        n += 1
    return n
