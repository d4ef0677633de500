"""``dreads report`` (figures, diagnostics, calibration, comparison, HTML), ``dreads calibrate``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli._app import INSPECT, app
from app.cli._files import atomic_output, check_output_path
from app.cli._gc import no_cyclic_gc
from app.cli.options import (
    DatabaseOpt,
    JsonOpt,
    cli_errors,
    console,
    database_url,
    err_console,
    open_store,
)
from app.errors import InputError
from app.report.methods import CalibrationMethod

if TYPE_CHECKING:
    from app.report.figures import Params
    from app.store.types import SessionFactory

__all__ = ["calibrate", "report"]

_FIG = "Figures"


def _store(database: str | None) -> SessionFactory:
    """The session factory; a database that cannot be opened is one line saying what to
    check (``app.store.migrate.open_store``)."""
    return open_store(database_url(database))


def _params(threshold_recall: float, threshold_fp: float, top_share: float) -> Params:
    from app.report.figures import Params

    if threshold_recall > threshold_fp:
        raise InputError(
            f"--threshold-recall {threshold_recall} is above --threshold-fp {threshold_fp}; "
            "the referral band runs from the recall threshold up to the false-positive one, "
            "so give a recall threshold at or below the false-positive threshold"
        )
    return Params(threshold_recall=threshold_recall, threshold_fp=threshold_fp,
                  top_share=top_share, band_low=threshold_recall, band_high=threshold_fp)


@app.command("report", rich_help_panel=INSPECT)
def report(
    run: Annotated[str, typer.Argument(metavar="RUN", help="Run name (or id).",
                                       show_default=False)],
    json_out: JsonOpt = False,
    html: Annotated[Path | None, typer.Option(
        "--html", help="Write one self-contained HTML page (plots embedded) and print one "
        "line: where it is and the headline figures.")] = None,
    threshold_recall: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Recall counts P(yes) above this.", rich_help_panel=_FIG)] = 0.30,
    threshold_fp: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="False positives: negatives with P(yes) above this.",
        rich_help_panel=_FIG)] = 0.70,
    top_share: Annotated[float, typer.Option(
        min=0.0, max=1.0, help="Share of positives ranked in this top share.",
        rich_help_panel=_FIG)] = 0.05,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="calib.json from `dreads calibrate`: adds calibrated figures.")
    ] = None,
    against: Annotated[str | None, typer.Option(
        "--against", help="Another run of the same decisions: side by side, with the "
        "difference.")] = None,
    pooled: Annotated[bool, typer.Option(
        "--pooled", help="Also show each kind's figures over all its questions together "
        "(marked pooled); by default every figure is per question.", rich_help_panel=_FIG)
    ] = False,
    database: DatabaseOpt = None,
) -> None:
    """Evaluation figures of a run: the field report's figures, per cell, with diagnostics.

    Questions with expected labels get AUC, recall, top share, ranks, false positives and
    the referral band (yes/no), accuracy (choice, score), per question and per cell, each
    with its 95% interval; every run gets per-cell diagnostics and the reasons decisions
    failed.
    """
    from app.report.calibration import load_calibration
    from app.report.document import report_with_rows
    from app.report.load import load_run_rows, resolve_run
    from app.report.tables import report_view
    from app.runs.sources import check_not_run_file
    from app.store.db import session_scope

    with cli_errors(), no_cyclic_gc():
        params = _params(threshold_recall, threshold_fp, top_share)
        if html is not None:
            check_output_path(html, option="--html")
        calib = load_calibration(calibration) if calibration is not None else None
        factory = _store(database)
        with session_scope(factory) as session:
            if html is not None:
                check_not_run_file(session, html, option="--html", instead="report.html")
            data = load_run_rows(session, resolve_run(session, run))
            doc, cal_rows = report_with_rows(session, data, params, calibration=calib,
                                             against=against, pooled=pooled)
        if html is not None:
            from app.config import run_env
            from app.report.html import render_html
            from app.runs.settings import image_policy

            page = render_html(doc, data.rows, cal_rows, images=image_policy(run_env()))
            _write(html, page, option="--html")
    if json_out:
        typer.echo(json.dumps(doc, indent=2, allow_nan=False))
    elif html is None:
        # Piped output is not cropped to 80 columns: the per-cell tables are wide.
        from rich.console import Console

        wide = console if console.is_terminal else Console(width=max(console.width, 160))
        wide.print(report_view(doc))
    if html is not None:
        _print_written(html, doc, to_stderr=json_out)


def _print_written(path: Path, doc: Mapping[str, Any], *, to_stderr: bool) -> None:
    """One line: where the page is and the headline figures (stderr when stdout is JSON)."""
    from app.report.headline import headline_line

    figures = headline_line(doc["headline"])
    simulator = " (answers from the SIMULATOR)" if doc["run"].get("simulator") else ""
    line = f"wrote {path}{simulator}: {figures}" if figures else f"wrote {path}{simulator}"
    (err_console if to_stderr else console).print(line, highlight=False, markup=False,
                                                  soft_wrap=True)


def _write(path: Path, text: str, *, option: str) -> None:
    """Write ``text`` to the user's ``path`` all at once (the old file stays if it fails)."""
    with atomic_output(path, option=option) as handle:
        handle.write(text)


@app.command("calibrate", rich_help_panel=INSPECT)
def calibrate(
    run: Annotated[str, typer.Argument(metavar="RUN", show_default=False,
                                       help="A run with expected labels (name or id).")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write calib.json.")],
    method: Annotated[CalibrationMethod, typer.Option(
        help="isotonic (monotone steps) or platt (logistic on the logit).")
    ] = CalibrationMethod.ISOTONIC,
    per_question: Annotated[bool, typer.Option(
        "--per-question/--global", help="One map for all questions (default: ranking figures "
        "stay exactly equal), or one map per question id with the global map as fallback "
        "(rankings within a question stay equal; pooled rankings can change).")] = False,
    json_out: JsonOpt = False,
    database: DatabaseOpt = None,
) -> None:
    """Fit a monotone calibration map of P(yes) from a run's labelled yes/no answers."""
    from app.report.calibration import fit_calibration
    from app.report.figures import binary_rows, noul_arrays
    from app.report.load import load_run_rows, resolve_run
    from app.report.scores import ece
    from app.runs.sources import check_not_run_file
    from app.store.db import session_scope

    with cli_errors():
        check_output_path(output)
        factory = _store(database)
        with session_scope(factory) as session:
            check_not_run_file(session, output, option="-o", instead="calib.json")
            data = load_run_rows(session, resolve_run(session, run))
        rows = [r for r in binary_rows(data.rows) if r.answered and r.p_yes is not None]
        y, s, _ = noul_arrays(rows)
        calib = fit_calibration(y, s, [r.question_id for r in rows], method=method,
                                per_question=per_question, source={"run": data.run.name})
        _write(output, json.dumps(calib.to_json(), indent=2) + "\n", option="-o")
        calibrated = calib.apply([r.question_id for r in rows], s)
    summary: dict[str, Any] = {
        "output": str(output), "method": method.value, "scope": calib.scope,
        "n": int(y.size), "positives": int(y.sum()), "question_maps": sorted(calib.questions),
        "ece_before": ece(y, s), "ece_after_in_sample": ece(y, calibrated),
    }
    if json_out:
        typer.echo(json.dumps(summary, indent=2, allow_nan=False))
        return
    console.print(
        f"wrote {output}: {method.value} {calib.scope} map from {summary['n']} labelled "
        f"answers ({summary['positives']} yes); {len(calib.questions)} per-question map(s); "
        f"ECE {summary['ece_before']:.4f} -> {summary['ece_after_in_sample']:.4f} (in sample: "
        "check it on another run with `dreads report OTHER --calibration`)", highlight=False)
