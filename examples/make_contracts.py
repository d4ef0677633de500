"""Generate the example job files and their simulator answer keys.

The shape follows the field report: clause pairs of a few synthetic contracts, each written in
several wordings, with planted contradictions (the same clause topic with two different values)
as the rare positives and every other pair as a negative. Consistent restatements of a clause
("echoes") are planted too, as hard negatives. Everything is deterministic in ``--seed``::

    python examples/make_contracts.py                # rewrite the shipped files (seed 116)
    python examples/make_contracts.py --seed 5 --out /tmp/ex

Files written (each job file ``X.jsonl`` has its answer key ``X.key.jsonl``, which the
embedded ``dreads run --upstream sim`` loads automatically):

- ``contracts.jsonl``   yes/no "do these two clauses contradict each other?" on every clause pair
- ``choice.jsonl``      the topic of one clause, among five options
- ``score.jsonl``       the risk of one clause for the Customer, 1-5
- ``small.jsonl``       five mixed decisions, the quickest thing to try
- ``batch_style.jsonl`` OpenAI-batch-style lines (``custom_id`` + ``body``)
- ``decisions.jsonl``   OpenAI Decisions requests as Batch lines (``url: /v1/decisions``):
  predicate, choice (string and boolean values) and score questions, and one bare request body
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from clauses import TOPICS, WORDINGS, Topic

DEFAULT_SEED = 116
CLAUSES_PER_CONTRACT = 12
CONFLICT_Q = "Do these two clauses contradict each other?"
TOPIC_Q = "Which subject does this clause deal with?"
RISK_Q = "How much risk does this clause put on the Customer?"
TOPIC_OPTIONS: dict[str, str] = {
    "payment": "when and how invoices must be paid",
    "termination": "how and when the agreement can be ended",
    "liability": "limits on what a party must pay for damage it causes",
    "confidentiality": "keeping the other party's information secret",
    "governing law": "which jurisdiction's law applies to the agreement",
}
RISK_LEVELS: tuple[str, ...] = (
    "negligible: standard, balanced terms",
    "low: slightly unfavourable, worth noting",
    "moderate: worth negotiating",
    "high: escalate to legal review",
    "severe: do not sign as drafted",
)

Line = dict[str, Any]


@dataclass(frozen=True)
class ContractSpec:
    """A contract to generate: its parties and how many clauses of each kind to plant."""

    name: str
    supplier: str
    customer: str
    conflicts: int  #: planted contradictions (positives)
    echoes: int  #: planted consistent restatements (hard negatives)


CONTRACTS: tuple[ContractSpec, ...] = (
    ContractSpec("C1", "Northwind Systems", "Acme Retail", conflicts=2, echoes=0),
    ContractSpec("C2", "Brightline Analytics", "Harbor Health", conflicts=2, echoes=1),
    ContractSpec("C3", "Kestrel Logistics", "Orchard Foods", conflicts=2, echoes=1),
    ContractSpec("C4", "Tallow Software", "Meridian Bank", conflicts=0, echoes=2),
)


@dataclass(frozen=True)
class Clause:
    """One numbered clause: a topic and its value."""

    section: int
    sub: int
    topic: Topic
    value: str

    @property
    def number(self) -> str:
        return f"{self.section}.{self.sub}"


@dataclass(frozen=True)
class Contract:
    spec: ContractSpec
    clauses: tuple[Clause, ...]  #: in document order


# -- building contracts ------------------------------------------------------------------------


def build_contract(rng: random.Random, spec: ContractSpec) -> Contract:
    """Base clauses one per section, then the planted clauses placed in other sections."""
    n_base = CLAUSES_PER_CONTRACT - spec.conflicts - spec.echoes
    topics = rng.sample(TOPICS, n_base)
    base = [Clause(i + 1, rng.randint(1, 3), t, rng.choice(t.values)) for i, t in enumerate(topics)]
    targets = rng.sample(base, spec.conflicts + spec.echoes)
    planted = [_plant(rng, base, c, conflict=i < spec.conflicts) for i, c in enumerate(targets)]
    clauses = _renumber(base, planted)
    return Contract(spec, tuple(sorted(clauses, key=lambda c: (c.section, c.sub))))


def _plant(rng: random.Random, base: list[Clause], original: Clause, *, conflict: bool) -> Clause:
    """A clause on ``original``'s topic, in a later section (or an earlier one if none)."""
    others = [v for v in original.topic.values if v != original.value]
    value = rng.choice(others) if conflict else original.value
    later = [c.section for c in base if c.section > original.section]
    section = rng.choice(later or [c.section for c in base if c.section != original.section])
    return Clause(section, 0, original.topic, value)


def _renumber(base: list[Clause], planted: list[Clause]) -> list[Clause]:
    """Give each planted clause the next free sub-number of its section."""
    used = {(c.section, c.sub) for c in base}
    out = list(base)
    for clause in planted:
        sub = 1 + max(s for sec, s in used if sec == clause.section)
        used.add((clause.section, sub))
        out.append(Clause(clause.section, sub, clause.topic, clause.value))
    return out


def render(clause: Clause, wording: str, spec: ContractSpec) -> str:
    """The clause's sentence in ``wording``."""
    supplier, customer = spec.supplier, spec.customer
    if wording == "legalese":
        supplier, customer = "the Supplier", "the Customer"
    text = clause.topic.templates[wording].format(
        v=clause.value, S=supplier, C=customer, Ss=_possessive(supplier), Cs=_possessive(customer)
    )
    return text[0].upper() + text[1:]


def _possessive(name: str) -> str:
    return name + ("'" if name.endswith("s") else "'s")


def contradicts(a: Clause, b: Clause) -> bool:
    return a.topic == b.topic and a.value != b.value


# -- job lines ---------------------------------------------------------------------------------


def _noul(instructions: str) -> dict[str, str]:
    return {"type": "noul", "instructions": instructions}


def _topic_question() -> dict[str, Any]:
    return {"type": "choice", "instructions": TOPIC_Q, "criteria": dict(TOPIC_OPTIONS)}


def _risk_question() -> dict[str, Any]:
    return {"type": "score", "instructions": RISK_Q, "criteria": list(RISK_LEVELS)}


def pair_lines(contract: Contract, wording: str) -> Iterator[Line]:
    """One yes/no decision per clause pair of ``contract`` in ``wording``."""
    spec = contract.spec
    for a, b in combinations(contract.clauses, 2):
        state = (f"Clause {a.number}: {render(a, wording, spec)} "
                 f"Clause {b.number}: {render(b, wording, spec)}")
        yield {
            "id": f"{spec.name}|{wording}|{a.number}x{b.number}",
            "cell": f"{spec.name}/{wording}",
            "state": state,
            "questions": {"conflict": _noul(CONFLICT_Q)},
            "expected": {"conflict": "yes" if contradicts(a, b) else "no"},
        }


def _clause_line(contract: Contract, wording: str, clause: Clause, kind: str) -> Line:
    spec = contract.spec
    return {
        "id": f"{spec.name}|{wording}|{clause.number}|{kind}",
        "cell": f"{spec.name}/{wording}",
        "state": f"Clause {clause.number}: {render(clause, wording, spec)}",
    }


def choice_lines(contract: Contract, wording: str) -> Iterator[Line]:
    """The topic of each clause whose topic is one of the options."""
    for clause in contract.clauses:
        if clause.topic.name in TOPIC_OPTIONS:
            line = _clause_line(contract, wording, clause, "topic")
            line["questions"] = {"topic": _topic_question()}
            line["expected"] = {"topic": clause.topic.name}
            yield line


def risk_label(clause: Clause) -> str:
    """Risk level 1-5: the value's rank on its topic's scale (mildest first)."""
    return str(clause.topic.values.index(clause.value) + 1)


def score_lines(contract: Contract, wording: str) -> Iterator[Line]:
    """The risk of each clause whose topic has a risk scale."""
    for clause in contract.clauses:
        if clause.topic.scored:
            line = _clause_line(contract, wording, clause, "risk")
            line["questions"] = {"risk": _risk_question()}
            line["expected"] = {"risk": risk_label(clause)}
            yield line


def small_lines(contracts: list[Contract]) -> list[Line]:
    """Five mixed decisions: a contradiction, an innocent pair, a choice, a score, a JSON state."""
    pairs = list(pair_lines(contracts[0], "plain"))
    positive = next(p for p in pairs if p["expected"]["conflict"] == "yes")
    negative = next(p for p in pairs if p["expected"]["conflict"] == "no")
    choice = next(choice_lines(contracts[1], "plain"))
    score = next(score_lines(contracts[2], "plain"))
    return [positive, negative, choice, score, _json_state_line(contracts[0])]


def _json_state_line(contract: Contract) -> Line:
    """A decision whose state is a JSON object, with two questions."""
    a, b = next((a, b) for a, b in combinations(contract.clauses, 2) if contradicts(a, b))
    spec = contract.spec
    return {
        "id": f"{spec.name}|json|{a.number}x{b.number}",
        "cell": f"{spec.name}/json",
        "state": {"contract": spec.name, "parties": [spec.supplier, spec.customer],
                  "clauses": {a.number: render(a, "plain", spec),
                              b.number: render(b, "plain", spec)}},
        "questions": {"conflict": _noul(CONFLICT_Q),
                      "risk": {**_risk_question(),
                               "instructions": "How much risk do these clauses put on the "
                                               "Customer?"}},
        "expected": {"conflict": "yes", "risk": str(max(int(risk_label(a)),
                                                        int(risk_label(b))))},
    }


def batch_sources(contracts: list[Contract]) -> list[Line]:
    """The decisions behind ``batch_style.jsonl``: two contradictions, two innocent pairs."""
    pairs = list(pair_lines(contracts[1], "terse"))
    return ([p for p in pairs if p["expected"]["conflict"] == "yes"][:2]
            + [p for p in pairs if p["expected"]["conflict"] == "no"][:2])


def batch_lines(sources: list[Line]) -> list[Line]:
    """OpenAI-batch-style requests for ``sources``: ``custom_id``, a Jev ``body``, and the
    cell and expected answer in ``metadata``."""
    return [{"custom_id": p["id"], "method": "POST", "url": "/v1/systemone",
             "body": {"state": p["state"], "questions": p["questions"]},
             "metadata": {"cell": p["cell"], "expected": p["expected"]}} for p in sources]


# -- OpenAI Decisions requests -----------------------------------------------------------------

BOOL_Q = "Do these two clauses set different terms for the same thing?"


def _level(text: str) -> dict[str, str]:
    label, _, description = text.partition(": ")
    return {"label": label, "description": description} if description else {"label": label}


def decisions_question(qid: str, question: dict[str, Any]) -> dict[str, Any]:
    """A Jev question as a Decisions question: noul -> predicate, choice -> choices with
    string values, score -> levels with a label and a description."""
    base = {"name": qid, "instructions": question["instructions"]}
    if question["type"] == "noul":
        return {"type": "predicate", **base}
    if question["type"] == "choice":
        return {"type": "choice", **base, "choices": [
            {"value": k, "description": v} if v else {"value": k}
            for k, v in question["criteria"].items()]}
    return {"type": "score", **base, "levels": [_level(x) for x in question["criteria"]]}


def decisions_expected(question: dict[str, Any], expected: str) -> Any:
    """A Jev expected answer as a Decisions one: true/false, the choice value, a level label."""
    if question["type"] == "noul":
        return expected == "yes"
    if question["type"] == "score":
        return _level(question["criteria"][int(expected) - 1])["label"]
    return expected


def decisions_body(line: Line) -> Line:
    return {"model": "dgemma", "input": line["state"],
            "questions": [decisions_question(qid, q) for qid, q in line["questions"].items()]}


def decisions_metadata(line: Line) -> Line:
    return {"cell": line["cell"], "expected": {
        qid: decisions_expected(line["questions"][qid], value)
        for qid, value in line["expected"].items()}}


def decisions_batch_line(line: Line) -> Line:
    """One Jev line as an OpenAI Batch line of a Decisions request."""
    return {"custom_id": line["id"], "method": "POST", "url": "/v1/decisions",
            "body": decisions_body(line), "metadata": decisions_metadata(line)}


def boolean_choice_line(line: Line) -> Line:
    """A clause pair asked as a choice between the booleans true and false."""
    question = {"type": "choice", "name": "conflict", "instructions": BOOL_Q,
                "choices": [{"value": True, "description": "they contradict each other"},
                            {"value": False}]}
    return {"custom_id": f"{line['id']}|bool", "method": "POST", "url": "/v1/decisions",
            "body": {"model": "dgemma", "input": line["state"], "questions": [question]},
            "metadata": {"cell": "booleans",
                         "expected": {"conflict": line["expected"]["conflict"] == "yes"}}}


def decisions_sources(contracts: list[Contract]) -> list[Line]:
    """The Jev decisions behind ``decisions.jsonl``: every pair of one contract and wording,
    the choices of another, the scores of a third."""
    return (list(pair_lines(contracts[0], "plain")) + list(choice_lines(contracts[1], "plain"))
            + list(score_lines(contracts[2], "plain")))


def decisions_lines(contracts: list[Contract]) -> tuple[list[Line], list[Line]]:
    """``decisions.jsonl`` and its key: Batch lines, boolean choices, one bare request body
    (its id in ``metadata``, its input one JSON part)."""
    sources = decisions_sources(contracts)
    booleans = batch_sources(contracts)
    bare = _json_state_line(contracts[0])
    body = {**decisions_body(bare), "input": [
        {"role": "user", "content": [{"type": "input_json", "data": bare["state"]}]}],
            "metadata": {"id": bare["id"], **decisions_metadata(bare)}}
    lines = ([decisions_batch_line(s) for s in sources]
             + [boolean_choice_line(p) for p in booleans] + [body])
    keys = (key_lines(sources)
            + [{"state": p["state"], "question": BOOL_Q,
                "label": "A" if p["expected"]["conflict"] == "yes" else "B"} for p in booleans]
            + key_lines([bare]))
    return lines, keys


# -- answer keys -------------------------------------------------------------------------------


def _canvas_label(question: dict[str, Any], expected: str) -> str:
    """The canvas label of an expected answer: yes/no, a letter by position, a 1-based level."""
    if question["type"] == "choice":
        return chr(ord("A") + list(question["criteria"]).index(expected))
    return expected


def key_lines(lines: Iterable[Line]) -> list[Line]:
    """One key line per (state, question): the simulator's ground truth."""
    return [
        {"state": line["state"], "question": question["instructions"],
         "label": _canvas_label(question, line["expected"][qid])}
        for line in lines
        for qid, question in line["questions"].items()
    ]


# -- files -------------------------------------------------------------------------------------


def generate(seed: int) -> dict[str, list[Line]]:
    """Every example file's lines, by file name."""
    rng = random.Random(seed)
    contracts = [build_contract(rng, spec) for spec in CONTRACTS]
    cells = [(c, w) for c in contracts for w in WORDINGS]
    sources = {
        "contracts": [line for c, w in cells for line in pair_lines(c, w)],
        "choice": [line for c, w in cells for line in choice_lines(c, w)],
        "score": [line for c, w in cells for line in score_lines(c, w)],
        "small": small_lines(contracts),
        "batch_style": batch_sources(contracts),
    }
    out: dict[str, list[Line]] = {}
    for stem, lines in sources.items():
        out[f"{stem}.jsonl"] = batch_lines(lines) if stem == "batch_style" else lines
        out[f"{stem}.key.jsonl"] = key_lines(lines)
    out["decisions.jsonl"], out["decisions.key.jsonl"] = decisions_lines(contracts)
    return out


def write_jsonl(path: Path, lines: list[Line]) -> None:
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="generator seed")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent,
                        help="output directory (default: examples/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, lines in generate(args.seed).items():
        write_jsonl(args.out / name, lines)
        print(f"{args.out / name}: {len(lines)} lines")


if __name__ == "__main__":
    main()
