"""The report document of a run: every figure, diagnostics, calibration and comparison.

``build_report`` returns a JSON-ready dict (``--json`` prints it as is); the Rich tables and
the HTML page are renderings of it. ``summarize_run`` gives the headline figures for the
embedded ``dreads run`` summary.

The document (``"format": "dreads.report/2"``; keys are always present, absent parts null)::

    partial      {settled, decisions} while decisions are in flight, else null
    run          {id, name, upstream, engine, replicates, status, settings_hash, settings,
                  fingerprint, created, simulator (answers came from ``dreads sim``)}
    params       thresholds: threshold_recall, threshold_fp, top_share, band_low/high, n_bins
    labelled     {questions, with_expected, noul, choice, score, ...}: counts of questions,
                  one key per registered question kind (``app.engine.kinds``)
    raw          {noul, choice, score, ...: {questions: {qid: SECTION}, pooled: SECTION or
                  null (--pooled)}, calibration: CALIBRATION}; each kind's figures by its
                  family (``families.py``, ``specs.py``), per question, never pooled unasked
    calibrated   like raw, P(yes) through --calibration; null without it
    calibration_source  {method, scope, run, n, positives} of calib.json; or null
    cross_fitted {method, folds, ece, questions: {qid: ece}}: without --calibration, the
                  yes/no ECE of a 5-fold cross-fitted isotonic map of the run itself (all
                  questions, and each); null with it, or too few labels
    diagnostics  {overall: DIAG, cells: {cell: DIAG}, flagged: [{cell, flag, count, total,
                  rate, others_rate, p_value}], flag_method} (the read's failures only)
    against      with --against: {a, b, matched, only_a, only_b, correction, settings,
                  questions: {qid: {kind, n, positives, overall: {figure: PAIR},
                  cells: {cell: {figure: PAIR}}}}, verdicts: [{question, figure, text, real,
                  better}], noise_floor, disagreement} (compare.py); PAIR = {a, b, diff
                  (a - b), interval, p_value, p_adjusted, method, detectable, n, verdict}
    reasons      [{kind, count, example}]: why decisions failed or were rejected, grouped
    infrastructure  {attempts, unanswered, kinds: [{kind, attempts, decisions, recovered, open,
                 unanswered}], pauses: [{kind, reason, paused_at, resumed_at, cancelled}],
                 lines}: what the infrastructure did to the run (a worker lost, an
                 interruption, a pause, an outage), never a cell's
                 (``app.store.infrastructure``, as status says it)
    headline     the figures every rendering leads with (headline.py): identity {run, model,
                 layout, mode, policy, max_draws, answered_by, simulator, replicates}, params,
                 partial, noul|choice|score: {questions: {qid: {replicates, partial, figures,
                 intervals, draw_sd (the headline's figures, ``specs``), calibrated_ece}}} or
                 null, ece {calibrated_by}, questions, answered,
                 unanswered, in_flight, attempts, failed_attempts, decisions_failed, draw_rows,
                 low_mass_draws
    review       {missed_positives, false_positives}: {total, items: [{decision, replicate,
                 question, cell, p_yes, label_mass, state}]} (review.py), raw P(yes)

    SECTION      {overall: BLOCK, cells: {cell: BLOCK}}, and confusion {labels, matrix} for
                 options (per question)
    BLOCK        {replicates, figures: {key: value}, intervals: {key: {low, high, method,
                 level}}, draw_sd: {key: sd across replicates}, partial, pooled}
                 (sections.py; typed in shape.py)
    CALIBRATION  {overall (null over several questions without --pooled; "pooled"),
                 questions: {qid: {n, positives, auc, ece, brier, reliability}}}
    DIAG         questions, answered, unanswered(_rate) (finished without an answer),
                 in_flight (pending / queued / leased), decision_statuses,
                 draw_rows (a draw: one question read once; a read is a request sent to the
                 model server, counted in spend), mass_draws, low_mass_draws/_share,
                 label_draws, argmax_not_label_draws/_share, attempts,
                 failed_attempts, failure_rate, failures {kind: n} (the read's attempts),
                 read_decisions, read_failed_decisions, low_mass_decisions,
                 decisions_with_mass, argmax_not_label_decisions, decisions_with_argmax
                 (decisions, as the flags count them), draws_mean,
                 draws {n: count}, stop_reasons, stderr {p50, p90, p99, max}, flags
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from app.engine import all_kinds, is_simulator, redacted_values
from app.errors import InputError
from app.report.calibration import CROSS_FOLDS, Calibration, cross_fitted
from app.report.compare import compare_rows
from app.report.compare_settings import settings_side_by_side
from app.report.diagnostics import diagnostics
from app.report.families import binary_kinds, view_of
from app.report.figures import (
    Params,
    binary_rows,
    binary_types,
    calibration_figures,
    confusion_table,
    figures_of,
    is_positive,
    typed_rows,
)
from app.report.headline import headline
from app.report.intervals import release_resamples
from app.report.load import IN_FLIGHT, QuestionRow, RunRows, load_run_rows, resolve_run
from app.report.review import review
from app.report.sections import kind_sections, question_blocks
from app.report.shape import Partial, ReportDocument
from app.report.spend import spend_section
from app.store.report_rows import run_by_id
from app.store.spend import spend_of
from app.store.types import Session
from app.store.views import failure_reasons, infrastructure

__all__ = ["FORMAT", "build_report", "calibrate_rows", "calibrated_rows", "cross_fitted_rows",
           "report_from_rows", "report_with_rows", "summarize_run"]

#: How the calibrated figures of a report without --calibration are made.
CROSS_FITTED = f"{CROSS_FOLDS}-fold cross-fitted isotonic"

FORMAT = "dreads.report/2"


def with_p_yes(row: QuestionRow, p_yes: float) -> QuestionRow:
    """``dataclasses.replace(row, p_yes=p_yes)``, a few times cheaper (a report maps a million
    answers): ``QuestionRow.with_p_yes``."""
    return row.with_p_yes(p_yes)


def calibrate_rows(rows: Sequence[QuestionRow], calibration: Calibration) -> list[QuestionRow]:
    """The rows with every answered yes/no P(yes) passed through ``calibration``."""
    binary = binary_types(rows)
    index = [i for i, r in enumerate(rows) if r.p_yes is not None and r.question_type in binary]
    out = list(rows)
    if not index:
        return out
    scores = calibration.apply([rows[i].question_id for i in index],
                               [float(rows[i].p_yes or 0.0) for i in index])
    for i, value in zip(index, scores.tolist(), strict=True):
        out[i] = rows[i].with_p_yes(float(value))
    return out


def cross_fitted_rows(rows: Sequence[QuestionRow]) -> list[QuestionRow] | None:
    """The rows with every answered, labelled yes/no P(yes) cross-fitted (``cross_fitted``: a
    map fitted on the other folds); None when either class has too few answers."""
    binary = binary_types(rows)
    index = [i for i, r in enumerate(rows) if r.answered and r.p_yes is not None
             and r.expected is not None and r.question_type in binary]
    scores = cross_fitted([1 if is_positive(rows[i]) else 0 for i in index],
                          [float(rows[i].p_yes or 0.0) for i in index])
    if scores is None:
        return None
    out = list(rows)
    for i, value in zip(index, scores.tolist(), strict=True):
        out[i] = rows[i].with_p_yes(float(value))
    return out


def calibrated_rows(rows: Sequence[QuestionRow],
                    calibration: Calibration | None) -> list[QuestionRow] | None:
    """The rows a report's calibrated figures come from: through ``calibration`` when given,
    else cross-fitted on the run itself (None: too few labels)."""
    if calibration is not None:
        return calibrate_rows(rows, calibration)
    return cross_fitted_rows(rows)


def _run_info(data: RunRows) -> dict[str, Any]:
    run = data.run
    fingerprint = dict(run.fingerprint or {})
    return {"id": run.id, "name": run.name, "upstream": run.upstream, "engine": run.engine,
            "replicates": run.replicates, "status": data.state.value,
            "settings_hash": run.settings_hash, "settings": redacted_values(run.settings or {}),
            "fingerprint": fingerprint or None,
            "created": run.created_at.isoformat() if run.created_at else None,
            "simulator": is_simulator(run.upstream, fingerprint,
                                      settings=dict(run.settings or {}))}


def _typed_sections(rows: Sequence[QuestionRow], p: Params, *, pooled: bool = False,
                    partial: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in all_kinds():
        typed = typed_rows(rows, kind.name)
        out[kind.name] = kind_sections(typed, figures_of(kind), p, pooled=pooled,
                                       partial=partial)
        if view_of(kind).confusion:
            by_question: dict[str, list[QuestionRow]] = {}
            for r in typed:
                by_question.setdefault(r.question_id, []).append(r)
            for qid, sec in out[kind.name]["questions"].items():
                sec["confusion"] = confusion_table(by_question[qid])
    out["calibration"] = calibration_figures(binary_rows(rows), p, pooled=pooled)
    return out


def partial_of(data: RunRows) -> Partial | None:
    """``{"settled": k, "decisions": n}`` while decisions are in flight, else None."""
    total = sum(data.counts.values())
    open_ = sum(v for k, v in data.counts.items() if k in IN_FLIGHT)
    return Partial(settled=total - open_, decisions=total) if open_ else None


def build_report(
    session: Session,
    run_ref: str,
    params: Params | None = None,
    *,
    calibration: Calibration | None = None,
    against: str | None = None,
    pooled: bool = False,
) -> ReportDocument:
    """The whole report of run ``run_ref`` (name or id); ``pooled`` adds each kind's figures
    over all its questions.

    Raises:
        InputError: the run (or the ``against`` run) does not exist.
    """
    data = load_run_rows(session, resolve_run(session, run_ref))
    return report_from_rows(session, data, params, calibration=calibration, against=against,
                            pooled=pooled)


def report_from_rows(
    session: Session,
    data: RunRows,
    params: Params | None = None,
    *,
    calibration: Calibration | None = None,
    against: str | None = None,
    pooled: bool = False,
) -> ReportDocument:
    """The report of already loaded rows (``session`` loads the ``against`` run)."""
    return report_with_rows(session, data, params, calibration=calibration,
                            against=against, pooled=pooled)[0]


def report_with_rows(
    session: Session,
    data: RunRows,
    params: Params | None = None,
    *,
    calibration: Calibration | None = None,
    against: str | None = None,
    pooled: bool = False,
) -> tuple[ReportDocument, list[QuestionRow] | None]:
    """``report_from_rows``, and the calibrated rows its figures came from (``calibrated_rows``:
    the page plots them), made once."""
    try:
        return _report_with_rows(session, data, params, calibration=calibration,
                                 against=against, pooled=pooled)
    finally:
        release_resamples()  # the bootstrap's memo is this report's, not the process's


def _report_with_rows(
    session: Session,
    data: RunRows,
    params: Params | None,
    *,
    calibration: Calibration | None,
    against: str | None,
    pooled: bool,
) -> tuple[ReportDocument, list[QuestionRow] | None]:
    p = params or Params()
    calibrated = calibrated_rows(data.rows, calibration)
    partial = partial_of(data)
    sections = {"pooled": pooled, "partial": partial is not None}
    doc: ReportDocument = {
        "format": FORMAT, "partial": partial, "run": _run_info(data), "params": asdict(p),
        "labelled": _labelled_counts(data.rows), "headline": None, "review": None,
        "raw": _typed_sections(data.rows, p, **sections),
        "calibrated": None, "calibration_source": None, "cross_fitted": None,
        "diagnostics": diagnostics(data.rows, data.cells), "against": None,
        "reasons": [r.as_dict() for r in failure_reasons(session, data.run.id)],
        "infrastructure": infrastructure(session, data.run.id).as_dict(),
        "spend": spend_section(spend_of(session, data.run.id)),
    }
    if calibration is not None and calibrated is not None:
        doc["calibrated"] = _typed_sections(calibrated, p, **sections)
        doc["calibration_source"] = {"method": calibration.method.value,
                                     "scope": calibration.scope, **calibration.source}
    elif calibrated is not None:
        fitted = calibration_figures(binary_rows(calibrated), p)
        doc["cross_fitted"] = {"method": "isotonic", "folds": CROSS_FOLDS,
                               "ece": fitted["overall"]["ece"],
                               "questions": {q: c["ece"]
                                             for q, c in fitted["questions"].items()}}
    if against is not None:
        doc["against"] = _against(session, data, against, p, pooled=pooled)
    doc["headline"] = _headline_of(doc)
    doc["review"] = review(data.rows, p)
    return doc, calibrated


def _question_ece(rows: Sequence[QuestionRow], p: Params) -> dict[str, float | None]:
    """The ECE of each yes/no question of ``rows``."""
    per = calibration_figures(binary_rows(rows), p)["questions"]
    return {q: c["ece"] for q, c in per.items()}


def _calibrated_ece(sections: dict[str, Any]) -> dict[str, float | None]:
    """Each yes/no question's ECE of calibrated sections."""
    out: dict[str, float | None] = {}
    for kind in binary_kinds():
        for q, block in question_blocks(sections[kind.name]).items():
            out[q] = block["figures"]["ece"]
    return out


def _headline_of(doc: ReportDocument) -> dict[str, Any]:
    blocks = {k.name: question_blocks(doc["raw"][k.name]) for k in all_kinds()}
    calibrated: dict[str, float | None] = {}
    by = None
    if doc["calibrated"]:
        calibrated, by = _calibrated_ece(doc["calibrated"]), "--calibration"
    elif doc["cross_fitted"] is not None:
        calibrated, by = doc["cross_fitted"]["questions"], CROSS_FITTED
    return headline(doc["run"], doc["params"], blocks, doc["diagnostics"]["overall"],
                    calibrated, calibrated_by=by, partial=doc["partial"])


def _against(session: Session, data: RunRows, ref: str, p: Params, *,
             pooled: bool = False) -> dict[str, Any]:
    """The comparison of run ``data`` (a) with run ``ref`` (b): ``compare.compare_rows`` and
    both runs' settings side by side (``compare_settings``)."""
    other = load_run_rows(session, resolve_run(session, ref))
    if other.run.id == data.run.id:
        raise InputError("--against names the same run; give another run of the same decisions")
    out = compare_rows(data.rows, other.rows, p, a=data.run.name, b=other.run.name,
                       pooled=pooled)
    if not out["matched"]:
        raise InputError(
            f"runs {data.run.name!r} and {other.run.name!r} share no decision (matched by "
            "decision id and question id); --against needs two runs of the same file"
        )
    return {**out, "settings": settings_side_by_side(_run_info(data), _run_info(other))}


def _labelled_counts(rows: Sequence[QuestionRow]) -> dict[str, int]:
    counts = {"questions": len(rows), "with_expected": sum(r.expected is not None for r in rows)}
    for kind in all_kinds():
        counts[kind.name] = len(typed_rows(rows, kind.name))
    return counts


def summarize_run(session: Session, run_id: int) -> dict[str, Any]:
    """Headline figures of a run for ``dreads run``'s summary: per question, each kind's
    headline figures (``specs``: AUC, recall, ... for yes/no; accuracy for choice and score)
    with their intervals, counts, flagged cells, whether the run is partial, and ``headline``
    (the same headline as the report's, headline.py)."""
    run = run_by_id(session, run_id)
    if run is None:
        raise InputError(f"no run with id {run_id}; list runs with `dreads runs`")
    data = load_run_rows(session, run)
    p = Params()
    partial = partial_of(data)
    blocks = {k.name: question_blocks(kind_sections(typed_rows(data.rows, k.name),
                                                    figures_of(k), p,
                                                    partial=partial is not None))
              for k in all_kinds()}
    diag = diagnostics(data.rows, data.cells)
    fitted = cross_fitted_rows(data.rows)
    kinds = {}
    for k in all_kinds():
        keys = view_of(k).headline
        kinds[k.name] = {
            "n": sum(int(b["figures"]["n"]) for b in blocks[k.name].values()),
            "questions": {q: {"figures": {f: b["figures"][f] for f in keys},
                              "intervals": {f: b["intervals"][f] for f in keys}}
                          for q, b in blocks[k.name].items()},
        }
    return {
        "run": run.name,
        "partial": partial,
        "questions": len(data.rows),
        "answered": diag["overall"]["answered"],
        "unanswered": diag["overall"]["unanswered"],
        **kinds,
        "params": asdict(p),
        "flagged_cells": diag["flagged"],
        "headline": headline(_run_info(data), asdict(p), blocks, diag["overall"],
                             {} if fitted is None else _question_ece(fitted, p),
                             calibrated_by=CROSS_FITTED, partial=partial),
    }
