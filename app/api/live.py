"""The live view of a run: ``dreads status --json`` plus what the run page shows beside it
(per-cell open decisions, the latest reason of each failure kind with its class, read or
infrastructure, rejected decisions, label mass warnings, the report link once nothing is left
to run); ``infrastructure`` (from status) says what the infrastructure did, never per cell.
Its ``status`` is the run's state (``app.store.states``), as everywhere."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from app.errors import outcome_class
from app.store.live import latest_failures, rejected_decisions
from app.store.runs import RunInfo
from app.store.states import OPEN
from app.store.types import Session
from app.store.views import run_status, status_by_cell

__all__ = ["LOW_MASS_WARN_SHARE", "live_view"]

#: A cell is flagged when at least this share of its answers has label mass under 0.5.
LOW_MASS_WARN_SHARE = 0.1
#: Rejected lines listed, each once with its replicates (the count of all rejected decisions
#: is in ``counts``).
REJECTED_SHOWN = 20


def live_view(session: Session, run: RunInfo) -> dict[str, Any]:
    report = run_status(session, run)
    view = report.as_dict()
    by_cell = status_by_cell(session, run.id)
    for cell in view["cells"]:
        cell["open"] = sum(by_cell.get((cell["cell"], s), 0) for s in OPEN)
    view["settled"] = report.total - report.remaining
    view["spend_line"] = report.spend_line
    view["failures"] = _failures(session, run.id, view["cells"],
                                 report.infrastructure.by_kind())
    view["rejected"] = [{"decision": r.decision, "cell": r.cell, "reason": r.reason,
                         "replicates": list(r.replicates)}
                        for r in rejected_decisions(session, run.id, limit=REJECTED_SHOWN)]
    view["warnings"] = _mass_warnings(view["cells"])
    base = f"/runs/{quote(run.name, safe='')}"
    view["ended"] = report.ended
    view["links"] = {"status": f"/v1/runs/{quote(run.name, safe='')}",
                     "report": f"{base}/report" if report.ended else None}
    view["updated"] = datetime.now(UTC).isoformat()
    return view


def _failures(session: Session, run_id: int, cells: list[dict[str, Any]],
              infrastructure: dict[str, int]) -> list[dict[str, Any]]:
    """Failed attempts by kind with their class (``OutcomeClass``): the read's summed over the
    cells, then the infrastructure's (the run's), each with its latest reason."""
    counts: dict[str, int] = {}
    for cell in cells:
        for kind, n in cell["failures"].items():
            counts[kind] = counts.get(kind, 0) + n
    counts.update(infrastructure)
    latest = latest_failures(session, run_id)
    return [{"kind": kind, "class": outcome_class(kind).value, "count": n,
             "latest": latest[kind].detail if kind in latest else "",
             "decision": latest[kind].decision if kind in latest else ""}
            for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


def _mass_warnings(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    warnings = []
    for cell in cells:
        answered = cell["questions"] - cell["unanswered"]
        if answered and cell["low_mass"] / answered >= LOW_MASS_WARN_SHARE:
            warnings.append({"cell": cell["cell"], "low_mass": cell["low_mass"],
                             "answered": answered, "share": cell["low_mass"] / answered})
    return warnings
