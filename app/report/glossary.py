"""What every figure and flag of a report means: the glossary the HTML page ends with.

One source of truth: the page renders ``glossary(params)``, and ``docs/commands.md``'s report
glossary lists the same terms (``tests/unit/report/test_glossary.py`` holds them together).
Terms carry the report's thresholds: ``{r}`` recall, ``{f}`` false positives, ``{t}`` top share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.report.labels import thresholds
from app.report.specs import METHOD_HELP

__all__ = ["GLOSSARY", "glossary"]

#: (term, meaning), in the order a reader meets them on the page
GLOSSARY: tuple[tuple[str, str], ...] = (
    ("positive, negative", "a yes/no question whose expected answer is yes (positive) or no "
     "(negative)."),
    ("AUC", "the chance that a random positive gets a higher P(yes) than a random negative; "
     "1 is a perfect ranking, 0.5 a random one."),
    ("recall >{r}", "positives with P(yes) above {r}, as k/n of the answered positives."),
    ("in top {t}", "positives ranked within the top {t} of all answered questions by P(yes)."),
    ("median rank, worst", "where the positives rank among all questions by P(yes), as a "
     "percentage of the questions (0% is the top): the median positive and the lowest one."),
    ("false positives >{f}", "negatives with P(yes) above {f}: the count, per 1,000 negatives "
     "and per 100 distinct states (documents)."),
    ("referral band {r}-{f}", "answers with P(yes) from {r} to {f}: neither clearly yes nor "
     "clearly no, the ones a person would check."),
    ("ECE", "expected calibration error: over ten equal bins of P(yes), the count-weighted "
     "gap between the mean P(yes) and the share of positives; 0 is calibrated."),
    ("Brier", "mean squared difference between P(yes) and the outcome (1 yes, 0 no)."),
    ("raw, calibrated", "P(yes) as the model gave it, and through a monotone map: the one "
     "of --calibration (from `dreads calibrate` on another run), or else a 5-fold "
     "cross-fitted isotonic map of this run, each answer mapped by a fit on the other folds "
     "(what calibrating this model would give); ranking figures are equal for both."),
    ("missed positive", "a positive with P(yes) at or below {r}: one recall does not count; "
     "listed from the lowest P(yes)."),
    ("top false positives", "negatives with P(yes) above {f}, listed from the highest."),
    ("read", "a request sent to the model server: one canvas (one question, or a group of "
     "them under --mode joint) read once. Spend, status and the metrics count reads."),
    ("draw", "one question read once, with its own noise: a read gives one draw per question "
     "of its canvas. An answer is the mean of its draws; the diagnostics count draws."),
    ("P", "P(yes), the probability of yes: the mean over the answer's draws."),
    ("label mass", "the probability the model put on the allowed labels at the answer slot; "
     "below 0.5 the draw is bad, not a no."),
    ("argmax≠label", "draws whose most likely token at the slot is not an allowed label."),
    ("unanswered", "questions whose decision finished without an answer (failed, rejected or "
     "cancelled); in flight ones may still be answered."),
    ("failed attempts", "attempts to answer a decision that failed, by kind; a decision is "
     "retried until it is answered or reaches the poison cap."),
    ("draws, stop reasons", "draws per answer, each with different noise, and why drawing "
     "stopped (agreed, max_draws, near_certain)."),
    ("stderr", "standard error of P(yes) over an answer's draws, at the 50th and 90th "
     "percentile."),
    ("flag", "a cell whose unanswered, failure, low label mass or argmax≠label rate stands far "
     "above the other cells' (one-sided exact binomial test, Bonferroni-corrected)."),
    ("|ΔP|", "with --against, how far two runs' answers to one question are apart: the total "
     "variation distance of their probabilities; for yes/no, the difference of P(yes)."),
    ("accuracy, log loss, MAE of level", "choice and score questions: the share answered "
     "with the expected label, the mean -log of its probability, and the mean absolute error "
     "of a score's expected level."),
    ("per question", "every figure is computed for each question on its own, overall and "
     "per cell; figures over all questions together appear only with --pooled, marked "
     "\"pooled\"."),
    ("[low, high]", "the 95% interval over items: the range the figure would likely fall in "
     "on another set of decisions like these. Each figure names its method below."),
    *((f"interval: {method.value}", text) for method, text in METHOD_HELP.items()),
    ("draw noise (±sd)", "with several replicates, each question's answer is the mean over "
     "them, and ±sd is the figure's standard deviation across replicates, each computed "
     "alone: the noise of drawing, much smaller than the interval over items; do not read "
     "it as the figure's uncertainty."),
    ("in top {t}: cap", "the most positives the top {t} can hold ({t} of the answered "
     "questions): a count equal to the cap is the best possible."),
    ("partial", "the run still has decisions in flight: figures are of the settled ones and "
     "will change."),
)


def glossary(params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The glossary with the report's thresholds filled in."""
    values = thresholds(params)
    return [(term.format(**values), text.format(**values)) for term, text in GLOSSARY]
