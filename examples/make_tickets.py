"""Generate ``tickets.jsonl`` and its simulator answer key: support tickets, two yes/no questions.

Each ticket asks two questions of one message ("refund": does the customer ask for money back?
"churn": will the customer leave?), so ``dreads run --mode joint`` reads both on one canvas and
``--mode isolated`` reads each alone: the example of ``dreads report A --against B`` in
docs/commands.md. Deterministic in ``--seed``::

    python examples/make_tickets.py                 # rewrite the shipped files (seed 38)
    python examples/make_tickets.py --seed 5 --out /tmp/ex
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

QUESTIONS = {"refund": "Does the customer ask for their money back?",
             "churn": "Will the customer leave?"}
CHANNELS = ("email", "chat", "phone")
PRODUCTS = ("router", "laptop bag", "desk lamp", "monitor arm", "keyboard", "headset")
PROBLEMS = ("arrived {d} days late", "stopped working after {d} days", "came without its cable",
            "was charged twice", "does not match the photo", "arrived with a broken part")


def tickets(n: int, seed: int) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """``n`` job lines (about 35% yes for each question) and their answer-key lines."""
    rng = random.Random(seed)
    jobs: list[dict[str, object]] = []
    key: list[dict[str, object]] = []
    for i in range(n):
        problem = rng.choice(PROBLEMS).format(d=rng.randint(2, 30))
        state = (f"Ticket {i + 1}: my {rng.choice(PRODUCTS)} (order {rng.randint(1000, 9999)}) "
                 f"{problem}.")
        expected = {q: "yes" if rng.random() < 0.35 else "no" for q in QUESTIONS}
        jobs.append({"id": f"T{i + 1:03d}", "cell": CHANNELS[i % len(CHANNELS)],
                     "state": state,
                     "questions": {q: {"type": "noul", "instructions": text}
                                   for q, text in QUESTIONS.items()},
                     "expected": expected})
        key += [{"state": state, "question": QUESTIONS[q], "label": expected[q]}
                for q in QUESTIONS]
    return jobs, key


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=38)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    jobs, key = tickets(args.n, args.seed)
    for name, lines in (("tickets.jsonl", jobs), ("tickets.key.jsonl", key)):
        (args.out / name).write_text("".join(json.dumps(line) + "\n" for line in lines),
                                     encoding="utf-8")


if __name__ == "__main__":
    main()
