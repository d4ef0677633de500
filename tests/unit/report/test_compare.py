"""``report --against`` on report rows (no database): matched items, replicates averaged,
the paired tests, Holm, verdicts, the noise floor and the settings' confound line."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from app.report import specs
from app.report.compare import COMPARED, compare_rows
from app.report.compare_settings import settings_side_by_side
from app.report.figures import Params, choice_figures
from app.report.intervals import delong_paired, holm, mcnemar
from app.report.load import QuestionRow
from app.report.sections import figure_block


def _row(key: str, p: float | None, y: int, *, rep: int = 0, cell: str = "c",
         qid: str = "q") -> QuestionRow:
    answered = p is not None
    return QuestionRow(
        decision_key=key, replicate=rep, cell=cell, state_key=key,
        status="done" if answered else "failed", question_id=qid, question_type="noul",
        labels=("yes", "no"), expected="yes" if y else "no", answered=answered,
        label=None if p is None else ("yes" if p > 0.5 else "no"), p_yes=p,
        probs=None if p is None else {"yes": p, "no": 1 - p})


def _scores(rng: np.random.Generator, y: np.ndarray, lead: float) -> np.ndarray:
    return np.asarray(1 / (1 + np.exp(-(lead * (2 * y - 1) + rng.normal(size=y.size)))))


def _runs(n: int, lead_a: float, lead_b: float, seed: int = 0,
          qids: tuple[str, ...] = ("q",)) -> tuple[list[QuestionRow], list[QuestionRow]]:
    rng = np.random.default_rng(seed)
    a: list[QuestionRow] = []
    b: list[QuestionRow] = []
    for qid in qids:
        y = (rng.random(n) < 0.4).astype(int)
        sa, sb = _scores(rng, y, lead_a), _scores(rng, y, lead_b)
        a += [_row(f"d{i}", float(sa[i]), int(y[i]), cell=f"c{i % 2}", qid=qid)
              for i in range(n)]
        b += [_row(f"d{i}", float(sb[i]), int(y[i]), cell="elsewhere", qid=qid)
              for i in range(n)]
    return a, b


def test_items_are_matched_and_replicates_averaged_first() -> None:
    y = [1, 0, 1, 0, 1, 0]
    rep0, rep1 = [0.9, 0.2, 0.4, 0.6, 0.8, 0.1], [0.5, 0.4, 0.9, 0.3, 0.7, 0.2]
    a = [_row(f"d{i}", p, y[i], rep=k) for k, ps in enumerate((rep0, rep1))
         for i, p in enumerate(ps)]
    a.append(_row("only-a", 0.5, 1))
    b = [_row(f"d{i}", 0.5 + 0.1 * (i % 3), y[i], cell="other") for i in range(6)]
    b += [_row("only-b", 0.5, 1), _row("d9", None, 1)]
    out = compare_rows(a, b, Params(), a="A", b="B")
    assert (out["matched"], out["only_a"], out["only_b"]) == (6, 1, 2)
    pair = out["questions"]["q"]["overall"]["auc"]
    mean = (np.array(rep0) + np.array(rep1)) / 2
    assert pair["n"] == 6
    assert pair["a"] == pytest.approx(roc_auc_score(y, mean))
    assert pair["diff"] == pytest.approx(pair["a"] - pair["b"])
    assert list(out["questions"]["q"]["cells"]) == ["c"]  # run A's cells


def test_paired_tests_are_delong_and_mcnemar_on_the_matched_items() -> None:
    a, b = _runs(300, 2.0, 0.8)
    out = compare_rows(a, b, Params(), a="sharp", b="blunt")
    pair = out["questions"]["q"]["overall"]
    y = np.array([r.expected == "yes" for r in a], dtype=int)
    sa, sb = (np.array([r.p_yes for r in rows]) for rows in (a, b))
    expected = delong_paired(y, sa, sb)
    assert pair["auc"]["p_value"] == pytest.approx(expected.p_value, abs=1e-12)
    assert pair["auc"]["interval"]["low"] == pytest.approx(expected.interval.low)
    hits_a, hits_b = sa[y == 1] > 0.3, sb[y == 1] > 0.3
    assert pair["recall"]["p_value"] == pytest.approx(
        mcnemar(int(np.sum(hits_a & ~hits_b)), int(np.sum(~hits_a & hits_b))))
    assert pair["recall"]["method"] == "McNemar mid-p"
    assert pair["ece"]["method"] == "paired bootstrap"
    assert pair["auc"]["verdict"]["real"] is True
    assert pair["auc"]["verdict"]["text"].startswith("sharp ranks better: ΔAUC +")
    assert pair["brier"]["verdict"]["better"] == "sharp"  # lower is better, named so
    # the same report gives the same bootstrap intervals
    again = compare_rows(a, b, Params(), a="sharp", b="blunt")["questions"]["q"]["overall"]
    assert again["ece"]["interval"] == pair["ece"]["interval"]


def test_same_quality_reads_as_no_difference_with_its_resolution() -> None:
    a, b = _runs(200, 1.5, 1.5, seed=3)
    out = compare_rows(a, b, Params(), a="first", b="second")
    verdict = out["questions"]["q"]["overall"]["auc"]["verdict"]
    assert verdict["real"] is False
    assert verdict["text"].startswith("no difference beyond noise: ΔAUC ")
    assert "this comparison detects |ΔAUC| ≥ 0.0" in verdict["text"]
    assert "with 80% power" in verdict["text"]


def test_p_values_are_holm_adjusted_over_questions_and_cells() -> None:
    a, b = _runs(150, 1.5, 1.2, seed=5, qids=("refund", "churn"))
    out = compare_rows(a, b, Params())
    qs = out["questions"]
    assert set(qs) == {"refund", "churn"}  # per question, never pooled
    raw = [qs[q]["overall"]["auc"]["p_value"] for q in ("refund", "churn")]
    assert [qs[q]["overall"]["auc"]["p_adjusted"] for q in ("refund", "churn")] == holm(raw)
    cells = qs["refund"]["cells"]
    assert [cells[c]["recall"]["p_adjusted"] for c in cells] == holm(
        [cells[c]["recall"]["p_value"] for c in cells])
    assert "Holm over 2" in qs["refund"]["overall"]["auc"]["verdict"]["text"]
    assert [(v["question"], v["figure"]) for v in out["verdicts"]][:2] == [
        ("churn", "auc"), ("churn", "recall")]


def test_holm_over_counts_only_the_figures_that_were_tested() -> None:
    a, b = _runs(150, 1.5, 1.2, seed=5, qids=("refund", "churn"))
    # a third question with only yes's: no AUC to test, so not in the AUC's Holm family
    a += [_row(f"d{i}", 0.9, 1, qid="all-yes") for i in range(20)]
    b += [_row(f"d{i}", 0.8, 1, qid="all-yes") for i in range(20)]
    qs = compare_rows(a, b, Params())["questions"]
    assert qs["all-yes"]["overall"]["auc"]["p_value"] is None
    assert "Holm over 2" in qs["refund"]["overall"]["auc"]["verdict"]["text"]


def _choice(key: str, label: str, p: float, rep: int) -> QuestionRow:
    probs = {"A": p, "B": 1 - p} if label == "A" else {"A": 1 - p, "B": p}
    return QuestionRow(decision_key=key, replicate=rep, cell="c", state_key=key, status="done",
                       question_id="pick", question_type="choice", labels=("A", "B"),
                       expected="A", answered=True, label=label, probs=probs)


def test_choice_replicates_are_judged_as_the_report_judges_them() -> None:
    # d0: A at 0.9, then B at 0.6 -> mean A 0.65: correct; d1: B at 0.9, A at 0.6 -> wrong
    # (a majority vote with ties counted right would say 2/2)
    rows = [_choice("d0", "A", 0.9, 0), _choice("d0", "B", 0.6, 1),
            _choice("d1", "B", 0.9, 0), _choice("d1", "A", 0.6, 1)]
    report = figure_block(rows, choice_figures, Params())["figures"]["accuracy"]
    pair = compare_rows(rows, rows, Params())["questions"]["pick"]["overall"]["accuracy"]
    assert pair["a"] == pair["b"] == report == 0.5


def test_noise_floor_needs_replicates_in_both_runs() -> None:
    rng = np.random.default_rng(1)
    y = (rng.random(80) < 0.5).astype(int)
    a = [_row(f"d{i}", float(s), int(y[i]), rep=k) for k in range(3)
         for i, s in enumerate(_scores(rng, y, 1.5))]
    b = [_row(f"d{i}", float(s), int(y[i]), rep=k) for k in range(2)
         for i, s in enumerate(_scores(rng, y, 1.0))]
    floor = compare_rows(a, b, Params())["noise_floor"]
    auc = floor["q"]["auc"]
    assert len(auc["replicates_a"]) == 3 and len(auc["replicates_b"]) == 2
    assert auc["sd_a"] == pytest.approx(np.std(auc["replicates_a"], ddof=1))
    assert auc["largest_within"] >= abs(auc["replicates_a"][0] - auc["replicates_a"][1])
    assert compare_rows(a, [r for r in b if r.replicate == 0], Params())["noise_floor"] is None


def _run(**settings: object) -> dict[str, object]:
    base = {"read_mode": "isolated", "layout": "vllm", "seed": 0, "model": "m"}
    return {"settings": {**base, **settings}, "fingerprint": {"model_id": "m"},
            "upstream": "sim", "engine": "vllm", "replicates": 1, "simulator": True}


def test_settings_side_by_side_name_the_confound() -> None:
    both = settings_side_by_side(_run(), _run(read_mode="joint", layout="reference"))
    assert [r["name"] for r in both["rows"][:2]] == ["read_mode", "layout"]  # differing first
    assert both["rows"][0]["a"] == "isolated" and both["rows"][0]["b"] == "joint"
    assert both["note"].startswith("2 read settings differ (read_mode, layout): the "
                                   "difference cannot be attributed to one of them")
    seed = settings_side_by_side(_run(), _run(seed=7))
    assert seed["differ"] == [] and "noise check" in seed["note"]
    one = settings_side_by_side(_run(), _run(read_mode="joint"))
    assert one["note"].startswith("one read setting differs (read_mode)")


def test_compared_figures_are_the_spec_tables() -> None:
    """``report --against`` compares the figures ``specs`` flags, each by its spec's key."""
    for family, figures in COMPARED.items():
        assert {c.key for c in figures} == set(specs.compared(family))


def test_pooled_only_when_asked_and_labelled() -> None:
    a, b = _runs(120, 1.5, 1.0, seed=9, qids=("refund", "churn"))
    assert compare_rows(a, b, Params())["pooled"] is None
    out = compare_rows(a, b, Params(), pooled=True)
    pooled = out["pooled"]["noul"]
    assert pooled["pooled"] is True and pooled["questions"] == ["churn", "refund"]
    assert pooled["n"] == 240
    lines = [v for v in out["verdicts"] if v.get("pooled")]
    assert lines and all(v["question"] == "noul pooled over 2 questions" for v in lines)
