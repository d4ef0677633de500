"""Lines of a submission whose id the run holds already: a repeat, the same content, or a change.

A submission's insert skips a row whose (run, id, replicate) is there. Each skipped line is then
one of:

- a **duplicate**: an earlier line of this same submission wrote that id (a bad line);
- **already there**: an earlier submission stored the same content (re-submitting is safe);
- **changed**: an earlier submission stored other content under the id. The stored decision is
  kept and the line reported, unless ``replace`` is asked: then a decision nothing has read
  yet takes the new content, and one that has started or settled is kept and reported.

Content is compared by ``content_digest`` (cell and payload), stored with each decision.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from app.engine import content_digest
from app.runs.jobfile import LineProblem, duplicate_reason
from app.store.changes import StoredLine, replace_unstarted, stored_contents, stored_lines
from app.store.runs import DecisionRow
from app.store.types import Session

__all__ = ["CHANGED_REASON", "Skipped", "sort_skipped"]

#: The reason of a changed line whose stored decision is kept.
CHANGED_REASON = "changed under an existing id; the stored decision is kept"


@dataclass
class Skipped:
    """The lines of one batch whose insert was skipped, sorted out."""

    duplicates: list[LineProblem] = field(default_factory=list)
    changed: list[LineProblem] = field(default_factory=list)  #: kept as stored
    replaced: list[str] = field(default_factory=list)  #: keys that took the new content

    @property
    def not_already_there(self) -> int:
        """Lines of these that are not "already there"."""
        return len(self.duplicates) + len(self.changed) + len(self.replaced)


def sort_skipped(session: Session, run_id: int, skipped: Mapping[str, int],
                 rows: Sequence[DecisionRow], *, first_id: int | None,
                 replace: bool) -> Skipped:
    """Sort out ``skipped`` (key -> line number): duplicates of this submission (its rows have
    ids from ``first_id`` on), lines already there, and changed lines (replaced where asked
    and possible). ``rows`` are the batch's rows, every replicate."""
    out = Skipped()
    if not skipped:
        return out
    stored = stored_lines(session, run_id, list(skipped))
    earlier: dict[str, StoredLine] = {}
    for key, line_no in skipped.items():
        found = stored.get(key)
        if found is None:
            continue
        if first_id is not None and found.id >= first_id and found.line_no != line_no:
            out.duplicates.append(LineProblem(line_no, key, duplicate_reason(key, found.line_no)))
        else:
            earlier[key] = found
    changed = _changed_keys(session, earlier, rows)
    if not changed:
        return out
    kept: Mapping[str, str] = dict.fromkeys(changed, "")
    if replace:
        outcome = replace_unstarted(session, run_id, [r for r in rows if r.key in changed])
        out.replaced, kept = outcome.replaced, outcome.kept
    out.changed = [LineProblem(skipped[key], key, _kept_reason(status))
                   for key, status in kept.items()]
    return out


def _changed_keys(session: Session, earlier: Mapping[str, StoredLine],
                  rows: Sequence[DecisionRow]) -> set[str]:
    """The keys of ``earlier`` whose stored content differs from their row's."""
    if not earlier:
        return set()
    digests = {key: found.content_hash for key, found in earlier.items()}
    unhashed = {found.id: key for key, found in earlier.items() if found.content_hash is None}
    if unhashed:  # stored before content hashes were kept
        for did, (cell, payload) in stored_contents(session, list(unhashed)).items():
            digests[unhashed[did]] = content_digest(cell, payload)
    new = {row.key: row.content_hash for row in rows if row.key in earlier}
    return {key for key, digest in digests.items() if digest != new.get(key)}


def _kept_reason(status: str) -> str:
    if not status:
        return CHANGED_REASON
    what = "answered" if status == "done" else status
    return f"{CHANGED_REASON} ({what}: only a decision not started yet is replaced)"
