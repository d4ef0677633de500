"""Clause topics for the synthetic contracts of ``make_contracts.py``.

Each topic has an ordered list of values, from the mildest for the Customer to the harshest
(the order is the risk scale of ``score.jsonl``), and one sentence template per wording.
Templates use ``{v}`` for the value, ``{S}``/``{C}`` for the Supplier/Customer and
``{Ss}``/``{Cs}`` for their possessives.
Two clauses of the same topic with different values contradict each other; with the same
value they are a consistent restatement (a hard negative).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TOPICS", "WORDINGS", "Topic"]

#: The wordings every contract is written in: the cells of the example are contract x wording.
WORDINGS: tuple[str, ...] = ("plain", "legalese", "terse", "house")


@dataclass(frozen=True)
class Topic:
    """One kind of clause: its values (mildest first) and a template per wording."""

    name: str
    values: tuple[str, ...]
    templates: dict[str, str]
    scored: bool = True  #: the value order is a meaningful risk scale


def _topic(name: str, values: tuple[str, ...], *templates: str, scored: bool = True) -> Topic:
    return Topic(name, values, dict(zip(WORDINGS, templates, strict=True)), scored)


TOPICS: tuple[Topic, ...] = (
    _topic(
        "payment", ("15", "30", "45", "60", "90"),
        "{C} pays each invoice within {v} days of receiving it.",
        "All sums invoiced hereunder shall be due and payable by {C} no later than {v} days "
        "following receipt of the relevant invoice.",
        "Payment: net {v} days.",
        "Invoices are payable within {v} days of receipt (net {v}).",
    ),
    _topic(
        "late interest", ("0.5", "1", "1.5", "2", "3"),
        "Late payments carry interest of {v}% per month.",
        "Any amount not paid when due shall accrue interest at the rate of {v} per cent per "
        "month from the due date until the date of actual payment.",
        "Late interest: {v}%/month.",
        "Overdue amounts bear interest at {v}% a month until paid.",
    ),
    _topic(
        "termination", ("180", "90", "60", "30", "7"),
        "Either party may end this agreement by giving the other {v} days' written notice.",
        "This Agreement may be terminated by either Party for convenience upon not less than "
        "{v} days' prior written notice to the other Party.",
        "Termination for convenience: {v} days' notice.",
        "Each party can terminate without cause on {v} days' notice in writing.",
    ),
    _topic(
        "liability", ("24", "12", "6", "3", "1"),
        "{Ss} total liability is capped at the fees {C} paid in the {v} months before the "
        "claim.",
        "The aggregate liability of {S} arising out of or in connection with this Agreement "
        "shall in no event exceed the fees paid by {C} during the {v} months immediately "
        "preceding the event giving rise to the claim.",
        "Liability cap: {v} months' fees.",
        "{Ss} liability is limited to {v} months of fees paid by {C}.",
    ),
    _topic(
        "confidentiality", ("7", "5", "3", "2", "1"),
        "Each party keeps the other's confidential information secret for {v} years after "
        "the agreement ends.",
        "The obligations of confidentiality set out herein shall survive the expiry or "
        "termination of this Agreement for a period of {v} years.",
        "Confidentiality survives {v} years.",
        "Confidential information stays protected for {v} years after termination.",
    ),
    _topic(
        "governing law",
        ("the State of Delaware", "the State of New York", "England and Wales",
         "the Province of Ontario", "the State of California"),
        "This agreement is governed by the laws of {v}.",
        "This Agreement and any dispute arising hereunder shall be governed by and construed "
        "in accordance with the laws of {v}.",
        "Governing law: {v}.",
        "The laws of {v} apply to this agreement.",
        scored=False,
    ),
    _topic(
        "warranty", ("24", "12", "6", "3", "1"),
        "{S} fixes defects reported within {v} months of delivery at no charge.",
        "{S} warrants that the Deliverables shall be free from material defects for a period "
        "of {v} months from the date of delivery.",
        "Warranty: {v} months from delivery.",
        "Defects reported within {v} months of delivery are remedied free of charge.",
    ),
    _topic(
        "delivery", ("10", "20", "30", "45", "60"),
        "{S} delivers each order within {v} days of accepting it.",
        "{S} shall effect delivery of each Order no later than {v} days after the acceptance "
        "thereof.",
        "Delivery: {v} days from order acceptance.",
        "Orders ship within {v} days of acceptance.",
    ),
    _topic(
        "price increase", ("2", "3", "5", "8", "12"),
        "{S} may raise its prices by at most {v}% once a year.",
        "{S} shall be entitled to increase the Fees once in each contract year by an amount "
        "not exceeding {v} per cent.",
        "Annual price increase cap: {v}%.",
        "Prices can go up by no more than {v}% per year.",
    ),
    _topic(
        "breach notice", ("24", "48", "72", "96", "168"),
        "{S} tells {C} about any data breach within {v} hours of finding it.",
        "{S} shall notify {C} of any Personal Data Breach without undue delay and in any "
        "event within {v} hours of becoming aware of it.",
        "Breach notification: {v} hours.",
        "Data breaches are reported to {C} within {v} hours of discovery.",
    ),
    _topic(
        "insurance", ("10,000,000", "5,000,000", "2,000,000", "1,000,000", "500,000"),
        "{S} carries liability insurance of at least ${v}.",
        "{S} shall maintain in force, with a reputable insurer, professional liability "
        "insurance with a limit of not less than US${v} per claim.",
        "Insurance: ${v} minimum cover.",
        "{S} keeps at least ${v} of liability cover in place.",
    ),
    _topic(
        "non-solicitation", ("6", "12", "18", "24", "36"),
        "Neither party hires the other's staff during the agreement and for {v} months "
        "after it.",
        "Neither Party shall solicit or engage any employee of the other Party during the "
        "Term and for a period of {v} months thereafter.",
        "Non-solicitation: term + {v} months.",
        "No poaching of the other side's employees for {v} months after the term.",
    ),
    _topic(
        "audit", ("5", "10", "15", "30", "60"),
        "{C} may audit {Ss} records after giving {v} days' notice.",
        "{C} shall be entitled to inspect and audit the relevant records of {S} upon not less "
        "than {v} days' prior written notice.",
        "Audit: {v} days' notice.",
        "{C} can audit {Ss} books on {v} days' notice.",
    ),
)
