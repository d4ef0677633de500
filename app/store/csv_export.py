"""A run's results as CSV rows (``dreads export --format csv``).

One row per decision, from ``views.iter_export``'s records. The columns are those that apply to
the run: the decision's own, then per question id (in first-seen order) the columns of its
kind's family (``QUESTION_COLUMNS``: ``p_yes`` for yes/no, ``mean_level`` for levels, ``label``
and ``probs`` where a label is not the answer's name), less the ones the run cannot fill (no
``cell`` in any line, one draw per answer, answers by dreads' reads or by a decision
endpoint). ``Q.answer`` and ``Q.expected`` are in one form for every type (yes/no, the option
name, the level's text), ``Q.label`` and ``Q.expected_label`` in another (a choice's letter, a
score level's number), so that ``answer == expected`` and ``label == expected_label`` compare
like with like. The list with every column's meaning is docs/commands.md#export (``tests``
compare the two).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.engine import Family, PolicyName, kind_named, stored_plans_reads
from app.errors import InputError
from app.store.export_shapes import state_text
from app.store.models import Decision, DecisionPayload
from app.store.records import RunInfo
from app.store.views import iter_export

__all__ = ["DECISION_COLUMNS", "QUESTION_COLUMNS", "Column", "CsvExport", "Needs",
           "csv_export", "question_types"]

#: The families whose answer's label is not its name (a letter, a level's number).
LABELLED: frozenset[Family] = frozenset({Family.NOMINAL, Family.ORDINAL})


class Needs(StrEnum):
    """What a run needs for a column to apply."""

    ALWAYS = "always"
    CELLS = "cells"  #: some line of the run gives a cell
    STATE = "state"  #: ``--with-state``
    DRAWS = "draws"  #: an answer may have more than one draw (dreads' reads, N > 1)
    ENDPOINT = "endpoint"  #: answered by a decision endpoint (``--answer-by``)


@dataclass(frozen=True)
class Column:
    """A column: its name (``Q.`` + name for a question's), when it applies, and the key of
    the export record (or of its answer) it is read from, and the kinds' families it applies
    to (None: every kind)."""

    name: str
    needs: Needs = Needs.ALWAYS
    families: frozenset[Family] | None = None
    key: str = ""

    def applies(self, families: frozenset[Family]) -> bool:
        return self.families is None or bool(self.families & families)

    @property
    def source(self) -> str:
        return self.key or self.name


DECISION_COLUMNS = (
    Column("id"), Column("cell", Needs.CELLS), Column("replicate"), Column("status"),
    Column("error_kind"), Column("error"), Column("state", Needs.STATE),
)
QUESTION_COLUMNS = (
    Column("answer", key="option"),
    Column("expected", key="expected_option"),
    Column("label", families=LABELLED),
    Column("expected_label", families=LABELLED, key="expected"),
    Column("p_yes", families=frozenset({Family.BINARY})),
    Column("mean_level", families=frozenset({Family.ORDINAL})),
    Column("probs", families=LABELLED),
    Column("confidence"), Column("top_prob"),
    Column("stderr", Needs.DRAWS), Column("agreement", Needs.DRAWS),
    Column("draws"), Column("stop_reason"),
    Column("label_mass"), Column("min_label_mass"), Column("argmax_is_label"),
    Column("entropy"),
    Column("endpoint_confidence", Needs.ENDPOINT),
)


@dataclass(frozen=True)
class CsvExport:
    """The header of a run's CSV and its rows (streamed)."""

    columns: list[str]
    rows: Iterator[dict[str, Any]]


#: (column name, question id or None for a decision column, column)
_Plan = list[tuple[str, str | None, Column]]


def csv_export(session: Session, run: RunInfo, *, with_state: bool = False) -> CsvExport:
    """The run's CSV: the columns that apply to it, and one row per decision."""
    met = _run_needs(session, run, with_state=with_state)
    plan: _Plan = [(c.name, None, c) for c in DECISION_COLUMNS if c.needs in met]
    plan += [(f"{qid}.{c.name}", qid, c)
             for qid, qtypes in question_types(session, run.id).items()
             for c in QUESTION_COLUMNS if c.needs in met and c.applies(_families(qtypes))]
    records = iter_export(session, run.id, with_state=with_state)
    return CsvExport(columns=[name for name, _, _ in plan],
                     rows=(_row(record, plan) for record in records))


def _families(qtypes: frozenset[str]) -> frozenset[Family]:
    """The families of these kinds (a kind no longer registered has none)."""
    out = set()
    for name in qtypes:
        try:
            out.add(kind_named(name).family)
        except InputError:
            continue
    return frozenset(out)


def _row(record: Mapping[str, Any], plan: _Plan) -> dict[str, Any]:
    answers = record["answers"]
    return {name: _cell(column.name, (record if qid is None else answers.get(qid, {}))
                        .get(column.source))
            for name, qid, column in plan}


def _cell(name: str, value: Any) -> Any:
    """A value as a CSV cell: the state as the model reads it, JSON for probabilities."""
    if name == "state":
        return state_text(value)
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return value


def _run_needs(session: Session, run: RunInfo, *, with_state: bool) -> set[Needs]:
    settings = run.settings
    by_endpoint = not stored_plans_reads(settings)
    fixed = settings.get("policy") == PolicyName.FIXED
    most = settings.get("fixed_draws" if fixed else "max_draws", 1)
    met = {Needs.ALWAYS}
    met |= {Needs.ENDPOINT} if by_endpoint else set()
    met |= {Needs.DRAWS} if not by_endpoint and int(most or 1) > 1 else set()
    met |= {Needs.STATE} if with_state else set()
    met |= {Needs.CELLS} if _has_cells(session, run.id) else set()
    return met


def _has_cells(session: Session, run_id: int) -> bool:
    stmt = select(Decision.id).where(Decision.run_id == run_id,
                                     Decision.cell.is_not(None)).limit(1)
    return session.scalar(stmt) is not None


def question_types(session: Session, run_id: int) -> dict[str, frozenset[str]]:
    """Question id -> the types it has in the run's lines, in first-seen order (streams the
    payloads of the first replicate)."""
    seen: dict[str, frozenset[str]] = {}
    stmt = (select(DecisionPayload.payload)
            .join(Decision, Decision.id == DecisionPayload.decision_id)
            .where(Decision.run_id == run_id, Decision.replicate == 0)
            .order_by(Decision.id).execution_options(yield_per=1000))
    for payload in session.scalars(stmt):
        for qid, spec in (payload.get("questions") or {}).items():
            qtype = str(spec.get("type", "")) if isinstance(spec, Mapping) else ""
            seen[qid] = seen.get(qid, frozenset()) | {qtype}
    return seen
