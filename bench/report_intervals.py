"""The report's intervals at a million rows: what each one costs on this machine.

    python bench/report_intervals.py                  # 1,000,000 rows in 250,000 decisions
    python bench/report_intervals.py -n 100000 --clusters 25000

Synthetic yes/no answers (scores normal on the logit scale, AUC about 0.76), four rows per
decision, made in memory (no database). Prints the wall and CPU seconds of each step of one
question set's intervals from ``app.report.intervals``: the clustered bootstrap's set-up,
Brier, accuracy, log loss and ECE in one pass (which draws the resample counts), the paired
bootstrap of the four against a second run, DeLong's AUC interval and paired test, a Wilson
interval and a McNemar comparison; then the same for one of four cells (a quarter of the
decisions). Two rows marked "not counted" show the cost of a figure once the counts are
drawn.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.report import intervals as iv  # noqa: E402


def _timed(label: str, fn: Callable[[], Any], total: list[tuple[float, float]] | None) -> Any:
    """Run ``fn``, print its wall and CPU seconds; add them to ``total`` unless it is None."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn()
    took, cpu = time.perf_counter() - start, time.process_time() - cpu
    if total is not None:
        total.append((took, cpu))
    shown = out.as_dict() if hasattr(out, "as_dict") else out
    print(f"{took:8.2f} s  ({cpu:6.2f} s CPU)  {label}: {shown}")
    return out


def _question_set(
    y: np.ndarray, s: np.ndarray, s_b: np.ndarray, clusters: np.ndarray, label: str,
) -> tuple[float, float]:
    total: list[tuple[float, float]] = []
    print(f"-- {label}: {y.size:,} rows, {np.unique(clusters).size:,} decisions")
    boot = _timed("bootstrap set-up", lambda: iv.ClusteredBootstrap(clusters, seed=0), total)
    print(f"           ({boot.reps} resamples, {boot.method} counts)")
    correct = ((s > 0.5) == (y == 1)).astype(float)
    correct_b = ((s_b > 0.5) == (y == 1)).astype(float)
    loss = -np.log(np.clip(np.where(y == 1, s, 1 - s), 1e-15, 1))
    loss_b = -np.log(np.clip(np.where(y == 1, s_b, 1 - s_b), 1e-15, 1))
    figures = [(*iv.mean_columns((s - y) ** 2), 0.0), (*iv.mean_columns(correct), 0.0),
               (*iv.mean_columns(loss), 0.0), (*iv.ece_columns(y, s, 10), 0.0)]
    _timed("Brier, accuracy, log loss, ECE (draws the resamples)",
           lambda: [i.as_dict() for i in boot.intervals(figures)], total)
    _timed("(not counted) the same again, resamples kept",
           lambda: [i.as_dict() for i in boot.intervals(figures)], None)
    _timed("(not counted) ECE alone", lambda: boot.interval(*iv.ece_columns(y, s, 10), 0.0),
           None)
    mean = iv.ratio_statistic()
    paired = [(iv.mean_columns((s - y) ** 2)[0], iv.mean_columns((s_b - y) ** 2)[0], mean),
              (iv.mean_columns(correct)[0], iv.mean_columns(correct_b)[0], mean),
              (iv.mean_columns(loss)[0], iv.mean_columns(loss_b)[0], mean),
              (iv.ece_columns(y, s, 10)[0], iv.ece_columns(y, s_b, 10)[0],
               iv.ece_statistic(10))]
    _timed("paired bootstrap of the four, A - B", lambda: [
        (round(t.diff or 0, 6), t.p_value) for t in boot.paired_many(paired)], total)
    _timed("AUC, DeLong", lambda: iv.auc_interval(y, s), total)
    _timed("AUC difference, DeLong paired", lambda: iv.delong_paired(y, s, s_b), total)
    hits = int(np.sum((s > 0.5) & (y == 1)))
    _timed("recall, Wilson", lambda: iv.wilson(hits, int(y.sum())), total)
    _timed("recall difference, McNemar", lambda: iv.mcnemar_paired(
        (s > 0.5)[y == 1], (s_b > 0.5)[y == 1]), total)
    wall, cpu = sum(w for w, _ in total), sum(c for _, c in total)
    print(f"{wall:8.2f} s  ({cpu:6.2f} s CPU)  all intervals and paired tests of {label}")
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=1_000_000, help="rows (answered questions)")
    parser.add_argument("--clusters", type=int, default=250_000, help="decisions")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    clusters = rng.permutation(np.arange(args.n) % args.clusters)
    y = (rng.random(args.n) < 0.3).astype(np.int64)
    s = 1.0 / (1.0 + np.exp(-(rng.normal(0.0, 1.0, args.n) + 1.0 * y - 1.0)))
    s_b = np.clip(s + rng.normal(0.0, 0.05, args.n), 0.0, 1.0)
    overall = _question_set(y, s, s_b, clusters, "all rows")
    cell = clusters % 4 == 0
    one_cell = _question_set(y[cell], s[cell], s_b[cell], clusters[cell], "one cell of four")
    print(f"{overall[0] + one_cell[0]:8.2f} s  ({overall[1] + one_cell[1]:6.2f} s CPU)  in all")


if __name__ == "__main__":
    main()
