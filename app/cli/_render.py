"""Rich rendering of the run commands' results (tables, the status view)."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from app.cli.options import console, database_url, err_console
from app.engine import SIMULATOR_LINE
from app.errors import EXIT_BAD_LINES, EXIT_USAGE
from app.report.tables import reasons_table

if TYPE_CHECKING:
    from app.runs.submit import LineProblem, SubmitReport
    from app.store.admin import CancelOutcome
    from app.store.views import RunOverview, RunStatusReport

__all__ = [
    "BAD_LINES_EXIT",
    "CHANGED_EXIT",
    "answers_file",
    "cancel_lines",
    "cells_table",
    "changed_report",
    "counts_text",
    "duration",
    "infrastructure_lines",
    "json_text",
    "next_steps",
    "problems_table",
    "resume_report",
    "runs_table",
    "settings_summary",
    "status_view",
    "submit_report",
]

_ORDER = ("pending", "queued", "leased", "done", "failed", "rejected", "cancelled")
#: Exit status of ``run`` / ``submit --fail-on-bad-lines`` when a line was bad or rejected.
BAD_LINES_EXIT = EXIT_BAD_LINES
#: Exit status of ``run`` / ``submit`` when a changed line's stored decision was kept.
CHANGED_EXIT = EXIT_USAGE
#: Ids of changed lines named on the terminal (``--json`` lists them all).
_SHOWN_IDS = 10
#: Problem lines listed in full on the terminal (``--json`` lists them all).
_SHOWN_PROBLEMS = 20


def json_text(doc: Any) -> str:
    """``doc`` as JSON text for ``console.print_json`` (datetimes and the like as strings)."""
    import orjson

    return orjson.dumps(doc, default=str).decode()


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def counts_text(counts: dict[str, int]) -> str:
    keys = [k for k in _ORDER if counts.get(k)] + sorted(set(counts) - set(_ORDER))
    return ", ".join(f"{k} {counts[k]}" for k in keys) or "no decisions"


def cancel_lines(run: str, outcome: CancelOutcome) -> list[str]:
    """What ``dreads cancel`` says: what it cancelled, or why it changed nothing."""
    counts = outcome.counts
    if outcome.changed:
        lines = [f"run {run!r} cancelled: {outcome.cancelled} decision(s) not started are "
                 "cancelled"]
    elif outcome.state == "finished":
        shown = {"done": counts.get("done", 0), "failed": counts.get("failed", 0),
                 "rejected": counts.get("rejected", 0)}
        lines = [f"run {run!r} is finished ({_tally(shown, keep=('done', 'failed'))}): "
                 "nothing to cancel"]
    else:
        lines = [f"run {run!r} is already cancelled ({_tally(counts)}): nothing to change"]
    if outcome.in_flight:
        lines.append(f"{outcome.in_flight} decision(s) are in flight on workers: they finish "
                     f"and keep their answers (`dreads status {run}` shows them)")
    return lines


def _tally(counts: dict[str, int], keep: tuple[str, ...] = ()) -> str:
    """``12 done, 3 failed``: the counts in status order, zeros left out unless kept."""
    keys = [k for k in _ORDER if counts.get(k) or k in keep]
    return ", ".join(f"{counts.get(k, 0)} {k}" for k in keys) or "no decisions"


def settings_summary(settings: dict[str, Any]) -> str:
    policy = settings.get("policy")
    if policy == "fixed":
        policy = f"fixed {settings.get('fixed_draws')}"
    return (f"{settings.get('model')} canvas {settings.get('canvas_length')} "
            f"{settings.get('read_mode')} {policy} thr {settings.get('threshold')} "
            f"max {settings.get('max_draws')} seed {settings.get('seed')}")


#: The longest id a problems table shows (the --json report has it whole).
_SHOWN_ID_CHARS = 60


def _shown_id(key: str) -> str:
    """A bad line's id as a terminal can show it: control characters (a NUL, CR) escaped,
    cut at ``_SHOWN_ID_CHARS``."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in key[:_SHOWN_ID_CHARS])
    return shown + ("…" if len(key) > _SHOWN_ID_CHARS else "")


def problems_table(title: str, problems: list[LineProblem]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("line", justify="right")
    table.add_column("id")
    table.add_column("reason", overflow="fold")
    for p in problems[:_SHOWN_PROBLEMS]:
        table.add_row(str(p.line_no), escape(_shown_id(p.key or "")), escape(p.reason))
    if len(problems) > _SHOWN_PROBLEMS:
        table.caption = (f"and {len(problems) - _SHOWN_PROBLEMS} more (--json lists every "
                         "line)")
        table.caption_justify = "left"
    return table


def submit_report(report: SubmitReport, fp_error: str | None, *, queued: bool = True) -> None:
    if report.bad:
        err_console.print(problems_table(f"{len(report.bad)} bad line(s), not stored",
                                         report.bad))
    if report.rejected:
        title = f"{len(report.rejected)} decision(s) the template cannot read"
        title += " (refused)" if report.refused else " (stored as rejected)"
        err_console.print(problems_table(title, report.rejected))
    if report.refused:
        err_console.print("[red]--strict: the file was refused; nothing was written.[/red] "
                          "Fix the lines above and submit again.")
        return
    if report.run is None:
        err_console.print(f"[red]error:[/red] none of the {report.lines} line(s) is a valid "
                          "decision; nothing was stored. Fix the lines above and try again.",
                          soft_wrap=True)
        return
    _submit_summary(report, fp_error, queued)


def _submit_summary(report: SubmitReport, fp_error: str | None, queued: bool) -> None:
    run = report.run
    assert run is not None
    verb = "created" if report.created else "existing"
    changes = ""
    if report.changed or report.replaced:
        changes = f", {len(report.changed) + report.replaced} changed"
    console.print(f"run {escape(repr(run.name))} ({verb}): {report.lines} line(s), "
                  f"{report.valid} valid; {report.inserted} decision(s) stored, "
                  f"{report.already_present} already there{changes}", highlight=False)
    if fp_error:
        err_console.print(f"[yellow]upstream not reached ({escape(fp_error)}); the server "
                          "fingerprint is recorded at the first worker contact or `dreads "
                          "resume`[/yellow]", highlight=False)
    pub = report.publish
    if pub.error:
        err_console.print(f"[yellow]published {pub.published} decision(s), then: "
                          f"{escape(pub.error)}[/yellow]")
    elif report.readable and queued:
        console.print(f"queued {pub.published} decision(s) in {pub.messages} message(s)")


def changed_report(report: SubmitReport, *, replace_changed: bool) -> None:
    """What became of the lines changed under an id the run holds (stderr); nothing when
    there were none."""
    if report.replaced:
        err_console.print(f"{report.replaced} changed line(s) replaced the stored decision "
                          "(not started yet): they are asked with the new content",
                          highlight=False)
    if not report.changed:
        return
    ids = [p.key or "" for p in report.changed]
    shown = ", ".join(ids[:_SHOWN_IDS]) + (" …" if len(ids) > _SHOWN_IDS else "")
    head = (f"{len(ids)} line(s) changed under an existing id (ids: {shown}): the stored "
            "decision is kept.")
    if replace_changed:
        advice = ("They were answered or started already; to ask them again, submit them to "
                  "a new run.")
    else:
        advice = ("To ask them again, submit to a new run, or pass --replace-changed to "
                  "replace those not yet answered.")
    err_console.print(f"[yellow]{escape(head)}[/yellow] {escape(advice)}", highlight=False,
                      soft_wrap=True)


def runs_table(overview: list[RunOverview]) -> Table:
    table = Table(title="runs", title_justify="left")
    for name in ("name", "status", "created", "settings", "replicates", "decisions"):
        table.add_column(name, overflow="fold", justify="right" if name == "replicates"
                         else "left")
    for o in overview:
        created = o.run.created_at.strftime("%Y-%m-%d %H:%M") if o.run.created_at else ""
        settings = Text(settings_summary(dict(o.run.settings)))
        if o.run.simulator:
            settings.append("\nSIMULATOR", style="bold yellow")
        table.add_row(escape(o.run.name), o.state.value, created, settings,
                      str(o.run.replicates), counts_text(o.counts))
    return table


def cells_table(report: RunStatusReport) -> Table:
    table = Table(title="per cell (failures: the read's own)", title_justify="left")
    for name in ("cell", "total", "done", "unanswered", "failures", "low mass", "argmax≠label"):
        table.add_column(name, justify="left" if name in ("cell", "failures") else "right")
    for c in report.cells:
        failures = ", ".join(f"{k} {v}" for k, v in sorted(c.failures.items())) or "-"
        table.add_row(escape(c.cell), str(c.total), str(c.done), str(c.unanswered), failures,
                      str(c.low_mass), str(c.argmax_not_label))
    return table


def status_view(report: RunStatusReport) -> Group:
    head = Text(f"run {report.run.name} ({report.state.value}): {report.total} decision(s): "
                f"{counts_text(report.counts)}")
    rate = Text(f"finished last 1 min {report.finished_1m}, last 5 min {report.finished_5m}; "
                f"{report.rate_per_s:.2f}/s; {report.remaining} left; "
                f"ETA {duration(report.eta_s)}")
    parts: list[Any] = [head]
    if report.run.simulator:
        parts.append(Text(SIMULATOR_LINE, style="bold yellow"))
    parts += [rate, Text(f"spend: {report.spend_line}")]
    if report.pause is not None:
        parts.append(Text(f"paused: {report.pause['reason']}", style="bold yellow"))
    parts.append(cells_table(report))
    parts += infrastructure_lines(report.infrastructure.lines())
    if report.reasons:
        parts.append(reasons_table([r.as_dict() for r in report.reasons]))
    return Group(*parts)


def infrastructure_lines(lines: Sequence[str]) -> list[Text]:
    """The infrastructure's events of a run (``app.store.infrastructure``), a line each, under
    a heading; "none" when nothing happened to it."""
    head = Text("infrastructure (not counted against any cell):", style="bold")
    if not lines:
        return [Text.assemble(head, " none")]
    return [head, *(Text(f"  {line}", style="yellow") for line in lines)]


def answers_file(run: str, fmt: str = "jsonl", sources: Iterable[str] = ()) -> str:
    """A file name for a run's export that is none of the files it was submitted from:
    ``RUN.answers.jsonl``, else the next free of a few others."""
    from app.runs.sources import free_name

    suffix = "jsonl" if fmt == "openai-batch" else fmt
    names = [f"{run}.answers.{suffix}", f"{run}.export.{suffix}",
             *(f"{run}.answers-{n}.{suffix}" for n in range(2, 10))]
    return free_name(names, sources)


def next_steps(run: str, db: Path | None = None, sources: Iterable[str] = ()) -> str:
    """What to run next after a run: the report, on the same database, and the export to a
    file that is none of the run's job files (``sources``)."""
    from app.store.urls import sqlite_path

    default = sqlite_path(database_url(None))
    where = ""
    if db is not None and (default is None or default.resolve() != db.resolve()):
        where = f" --database-url {shlex.quote(str(db))}"
    name = shlex.quote(run)
    out = shlex.quote(answers_file(run, sources=sources))
    return (f"next: dreads report {name}{where} --html report.html (every figure, per cell, "
            f"with plots); dreads export {name}{where} -o {out} (every answer)")


def resume_report(report: Any) -> None:
    for line in report.lines():
        console.print(line, highlight=False)
