"""The comparison of ``report A --against B`` on two large runs, without the database.

    python bench/report_against.py                      # 2 x 1,000,000 answered questions
    python bench/report_against.py -n 200000 --questions 2

Builds two runs' report rows in memory (``-n`` answered yes/no questions each: ``-n /
--questions`` decisions in 8 cells, ``--questions`` questions each, 35% yes, run B reading a
little worse than run A) and times ``app.report.compare.compare_rows`` on them: matching,
averaging, every figure's paired test per question and per cell (DeLong, McNemar, the paired
clustered bootstrap), Holm, verdicts, and where the answers differ. Loading the rows from SQL
is the single-run report's cost (``bench/report_intervals.py``) and is not counted here.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.report.compare import compare_rows  # noqa: E402
from app.report.figures import Params  # noqa: E402
from app.report.load import QuestionRow  # noqa: E402


def _rows(n: int, questions: int, lead: float, seed: int) -> list[QuestionRow]:
    rng = np.random.default_rng(seed)
    truth = np.random.default_rng(0).random(n) < 0.35  # the same truth for both runs
    s = 1.0 / (1.0 + np.exp(-(lead * (2 * truth - 1) + rng.normal(size=n))))
    out = []
    for i in range(n):
        d, q = divmod(i, questions)
        p = float(s[i])
        out.append(QuestionRow(
            decision_key=f"d{d}", replicate=0, cell=f"cell-{d % 8}", state_key=f"d{d}",
            status="done", question_id=f"q{q}", question_type="noul", labels=("yes", "no"),
            expected="yes" if truth[i] else "no", answered=True,
            label="yes" if p > 0.5 else "no", p_yes=p, probs={"yes": p, "no": 1.0 - p}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="answered questions per run")
    parser.add_argument("--questions", type=int, default=4, help="questions per decision")
    args = parser.parse_args()
    start = time.perf_counter()
    a = _rows(args.n, args.questions, 2.0, 1)
    b = _rows(args.n, args.questions, 1.9, 2)
    built = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    out = compare_rows(a, b, Params(), a="A", b="B")
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{args.n:,} answered questions per run ({args.n // args.questions:,} decisions, "
          f"{args.questions} questions each, 8 cells): rows built in {built:.1f} s; "
          f"compare_rows {took:.1f} s wall, {cpu:.1f} s CPU (all threads; load average "
          f"{os.getloadavg()[0]:.1f})")
    for v in out["verdicts"][:6]:
        print(f"  {v['question']}: {v['text']}")


if __name__ == "__main__":
    main()
