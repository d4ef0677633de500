"""The simulator's answer key: one JSONL line per (state, question) with its true answer.

A line is ``{"state", "question", "label"[, "image_sha256"]}``: the state as the job file gives
it, the question's instructions, and the answer as a job file's ``expected`` gives it (a
label, an option name, a level's text or index, yes/no). When the key is ``X.key.jsonl`` and
the job file ``X.jsonl`` lies beside it, each line is read against the file's questions: its
answer becomes the question's label, and the lines that match no question, or name an answer
their question does not offer, are counted in ``AnswerKey.warnings`` (one line per kind of
problem). Without that file, an answer is turned into a label when a read's prompt shows the
question's options (``Asked.key_label``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from app.engine import QuestionsMemo, kind_of, parse_decision, serialize_state
from app.engine.questions import answer_label
from app.engine.types import Question
from app.errors import ConfigError, InputError

__all__ = ["AnswerKey", "KeyEntry", "answer_key_of", "job_file_beside"]

KeyEntry = tuple[str, str] | tuple[str, str, tuple[str, ...]]
#: ``examples/foo.jsonl`` -> ``examples/foo.key.jsonl``: where ``dreads run --upstream sim``
#: looks for the answer key of a job file, and where the key's job file is.
_SUFFIX = ".key.jsonl"
_SHOWN = 60  #: characters of a state or question quoted in a warning
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class _Line:
    line_no: int
    entry: KeyEntry
    answer: Any  #: as written: a label, an option name, a level's text or index, a boolean


class AnswerKey:
    """(serialised state, instructions[, images' sha256s]) -> true answer. A line with
    ``image_sha256`` (a list of hex digests, in the read's order) answers only a read with
    those images; one without answers any read of its state and question."""

    def __init__(self, labels: Mapping[KeyEntry, Any], *, job_file: Path | None = None,
                 warnings: tuple[str, ...] = ()) -> None:
        self.labels = dict(labels)
        self.job_file = job_file  #: the job file its lines were read against, if any
        self.warnings = warnings  #: one line per kind of problem met there

    @classmethod
    def load(cls, path: str | Path) -> AnswerKey:
        """Read the key, and read it against ``X.jsonl`` when the key is ``X.key.jsonl``.

        Raises:
            ConfigError: the file cannot be read, or a line is not an answer-key line (named).
        """
        job_file = job_file_beside(Path(path))
        asked_by = _file_questions(job_file) if job_file is not None else {}
        try:
            if job_file is None:
                return cls({line.entry: line.answer for line in _read(path)})
            return _against(_read(path), str(path), job_file, asked_by)
        except OSError as exc:
            raise ConfigError(f"cannot read the answer key {str(path)!r}: "
                              f"{exc.strerror or exc}") from exc

    def label(self, state_text: str, instructions: str, images: tuple[str, ...] = ()) -> Any:
        """The answer of a read's question; None when the key has none."""
        if images and (found := self.labels.get((state_text, instructions, images))) is not None:
            return found
        return self.labels.get((state_text, instructions))


def answer_key_of(job_file: Path) -> Path:
    """The answer key that goes with ``job_file`` (whether or not it exists)."""
    return job_file.with_name(job_file.stem + _SUFFIX)


def job_file_beside(key: Path) -> Path | None:
    """``examples/foo.key.jsonl`` -> ``examples/foo.jsonl`` when that file exists."""
    if not key.name.endswith(_SUFFIX):
        return None
    job_file = key.with_name(key.name.removesuffix(_SUFFIX) + ".jsonl")
    return job_file if job_file.is_file() else None


def _read(path: str | Path) -> Iterator[_Line]:
    with open(path, "rb") as handle:  # line by line: a large run's key is large
        for line_no, line in enumerate(handle, start=1):
            if line.strip():
                yield _key_line(line, path, line_no)


def _key_line(line: bytes, path: str | Path, line_no: int) -> _Line:
    """One answer-key line.

    Raises:
        ConfigError: the line is not an answer-key line (named by file and number).
    """
    try:
        obj = orjson.loads(line)
        state, question = serialize_state(obj["state"]), str(obj["question"])
        answer = obj["label"]
        if not isinstance(answer, str | int | bool):
            raise ValueError("label must be a string, a number or a boolean")
        digests = obj.get("image_sha256")
        if digests is None:
            return _Line(line_no, (state, question), answer)
        if not isinstance(digests, list) or not all(isinstance(d, str) for d in digests):
            raise ValueError("image_sha256 must be a list of strings")
        return _Line(line_no, (state, question, tuple(d.lower() for d in digests)), answer)
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{path}:{line_no}: an answer-key line needs JSON with state, question and label, "
            f"and image_sha256 a list of hex digests if given ({exc})") from exc


Asked = dict[tuple[str, str], dict[Question, str]]


def _file_questions(job_file: Path) -> Asked:
    """(serialised state, instructions) -> each distinct question asked so, with the id of the
    first decision asking it. Lines that are not decisions are passed over (a run names them).

    Raises:
        ConfigError: the job file cannot be read.
    """
    try:
        return _questions_in(job_file)
    except OSError as exc:
        raise ConfigError(f"cannot read {str(job_file)!r}, the job file beside the answer key: "
                          f"{exc.strerror or exc}") from exc


def _questions_in(job_file: Path) -> Asked:
    memo: QuestionsMemo = {}
    found: Asked = {}
    with open(job_file, "rb") as handle:
        for line in handle:
            try:
                decision = parse_decision(orjson.loads(line.removeprefix(_BOM)), memo=memo)
            except (orjson.JSONDecodeError, InputError, TypeError, AttributeError):
                continue
            state = serialize_state(decision.state)
            for question in decision.questions:
                found.setdefault((state, question.instructions), {}).setdefault(
                    question, decision.id)
    return found


def _label(asked: Mapping[Question, str], answer: Any) -> str | None:
    for question in asked:
        try:
            return answer_label(question, answer)
        except InputError:
            continue
    return None


class _Tally:
    """How many key lines met one problem, and the first of them."""

    def __init__(self) -> None:
        self.count = 0
        self.first = ""

    def add(self, first: str) -> None:
        self.count += 1
        self.first = self.first or first


def _against(lines: Iterable[_Line], path: str, job_file: Path, asked_by: Asked) -> AnswerKey:
    labels: dict[KeyEntry, Any] = {}
    unmatched, unoffered = _Tally(), _Tally()
    for line in lines:
        state, instructions = line.entry[0], line.entry[1]
        asked = asked_by.get((state, instructions))
        label = _label(asked, line.answer) if asked else None
        labels[line.entry] = line.answer if label is None else label
        if not asked:
            unmatched.add(f"line {line.line_no}: question {_short(instructions)} of state "
                          f"{_short(state)}")
        elif label is None:
            question, did = next(iter(asked.items()))
            unoffered.add(f"line {line.line_no}: {line.answer!r} for question {question.id!r} "
                          f"of decision {did!r}, which takes {_takes(question)}")
    return AnswerKey(labels, job_file=job_file,
                     warnings=_warnings(path, job_file, unmatched, unoffered))


def _warnings(path: str, job_file: Path, unmatched: _Tally, unoffered: _Tally
              ) -> tuple[str, ...]:
    out = []
    if unmatched.count:
        out.append(f"answer key {path}: {unmatched.count} line(s) match no question of "
                   f"{job_file} and answer nothing (first: {unmatched.first}); a line's state "
                   "and question are a decision's state and its question's instructions, as "
                   "the job file gives them")
    if unoffered.count:
        out.append(f"answer key {path}: {unoffered.count} line(s) name an answer their "
                   f"question does not offer, so its reads are noise (first: {unoffered.first}"
                   "); give a label, option name or level text, as 'expected' takes them")
    return tuple(out)


def _takes(question: Question) -> str:
    return f"{'/'.join(question.labels)} or {kind_of(question).key_takes}"


def _short(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "...")
