"""The lists a reviewer opens a report for: the positives missed and the top false positives.

A missed positive is an answered yes/no question expected "yes" whose P(yes) is not above the
recall threshold (it is what recall does not count); a false positive is one expected "no"
whose P(yes) is above the false-positive threshold. Both are sorted by how wrong they are:
missed positives by ascending P(yes), false positives by descending P(yes). Every missed
positive is listed (there are few: recall is the figure to keep high); false positives are
capped at ``FALSE_POSITIVES_SHOWN`` with the total stated. The lists use the raw P(yes).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from app.images import shown_ref
from app.report.figures import Params, binary_rows, is_positive
from app.report.load import QuestionRow

__all__ = ["FALSE_POSITIVES_SHOWN", "STATE_WORDS", "review", "state_words"]

#: false positives listed (the total is always given)
FALSE_POSITIVES_SHOWN = 20
#: words of the state shown beside each listed question
STATE_WORDS = 12


def state_words(state_key: str, words: int = STATE_WORDS) -> str:
    """The first ``words`` words of a state (``QuestionRow.state_key``), "…" when cut."""
    try:
        state = json.loads(state_key)
    except ValueError:
        state = state_key
    text = state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)
    parts = text.split()
    return " ".join(parts[:words]) + (" …" if len(parts) > words else "")


def _item(r: QuestionRow) -> dict[str, Any]:
    item = {"decision": r.decision_key, "replicate": r.replicate, "question": r.question_id,
            "cell": r.cell, "p_yes": r.p_yes, "label_mass": r.label_mass,
            "state": state_words(r.state_key)}
    if r.images:
        item["images"] = [shown_ref(image.ref) for image in r.images]
    return item


def _listed(rows: Sequence[QuestionRow], keep: Callable[[float], bool], *, descending: bool,
            cap: int | None) -> dict[str, Any]:
    chosen = [r for r in rows if r.p_yes is not None and keep(float(r.p_yes))]
    chosen.sort(key=lambda r: (-float(r.p_yes or 0.0) if descending else float(r.p_yes or 0.0),
                               r.decision_key, r.replicate, r.question_id))
    shown = chosen if cap is None else chosen[:cap]
    return {"total": len(chosen), "items": [_item(r) for r in shown]}


def review(rows: Sequence[QuestionRow], p: Params) -> dict[str, Any]:
    """``{"missed_positives": LIST, "false_positives": LIST}``; LIST = ``{total, items}``,
    an item ``{decision, replicate, question, cell, p_yes, label_mass, state}`` and, for a
    decision with images, ``images`` (their references as shown)."""
    done = [r for r in binary_rows(rows) if r.answered]
    positives = [r for r in done if is_positive(r)]
    negatives = [r for r in done if not is_positive(r)]
    return {
        "missed_positives": _listed(positives, lambda s: s <= p.threshold_recall,
                                    descending=False, cap=None),
        "false_positives": _listed(negatives, lambda s: s > p.threshold_fp, descending=True,
                                   cap=FALSE_POSITIVES_SHOWN),
    }
