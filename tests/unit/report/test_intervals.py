"""Intervals and paired tests against scipy, hand computations and a naive DeLong."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray
from scipy.stats import binomtest, false_discovery_control
from sklearn.metrics import roc_auc_score

from app.report import intervals as iv
from app.report import scores


def _binormal(rng: np.random.Generator, m: int, n: int, d: float) -> tuple[
    NDArray[np.int64], NDArray[np.float64]
]:
    y = np.r_[np.ones(m, dtype=np.int64), np.zeros(n, dtype=np.int64)]
    return y, np.r_[rng.normal(d, 1.0, m), rng.normal(0.0, 1.0, n)]


def _naive_components(y: NDArray[np.int64], s: NDArray[np.float64]) -> tuple[
    float, NDArray[np.float64], NDArray[np.float64]
]:
    """DeLong's structural components by their O(m n) definition: psi = 1, 1/2 on ties, 0."""
    x, z = s[y == 1], s[y == 0]
    psi = (x[:, None] > z[None, :]) + 0.5 * (x[:, None] == z[None, :])
    return float(psi.mean()), psi.mean(axis=1), psi.mean(axis=0)


def _naive_variance(y: NDArray[np.int64], s: NDArray[np.float64]) -> float:
    _, v10, v01 = _naive_components(y, s)
    return float(np.var(v10, ddof=1) / v10.size + np.var(v01, ddof=1) / v01.size)


# --- k/n ---------------------------------------------------------------------------------


def test_wilson_and_exact_match_scipy_and_empty_has_no_bounds() -> None:
    w = iv.wilson(7, 20)
    ci = binomtest(7, 20).proportion_ci(0.95, method="wilson")
    assert (w.low, w.high, w.method) == (pytest.approx(ci.low), pytest.approx(ci.high), "Wilson")
    e = iv.exact_binomial(0, 20)
    assert e.low == 0.0 and e.high == pytest.approx(1 - 0.025 ** (1 / 20))
    assert iv.wilson(0, 0).as_dict() == {"low": None, "high": None, "method": "Wilson",
                                         "level": 0.95}
    with pytest.raises(ValueError, match="k <= n"):
        iv.wilson(5, 3)


# --- DeLong ------------------------------------------------------------------------------


def test_delong_equals_the_naive_structural_components_with_ties() -> None:
    rng = np.random.default_rng(5)
    y, s = _binormal(rng, 60, 90, 1.0)
    s = np.round(s, 1)  # many ties
    auc, var = iv.delong(y, s)
    assert auc == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert var == pytest.approx(_naive_variance(y, s), abs=1e-12)


def test_delong_without_both_classes_is_none() -> None:
    assert iv.delong([1, 1, 1], [0.1, 0.2, 0.3]) == (None, None)
    assert iv.auc_interval([0, 0], [0.1, 0.2]).low is None
    with pytest.raises(ValueError, match="finite"):
        iv.delong([0, 1], [0.1, float("nan")])


def test_auc_interval_stays_in_unit_range_and_is_never_zero_width() -> None:
    perfect = iv.auc_interval([0, 0, 0, 1, 1, 1], [0.1, 0.2, 0.3, 0.7, 0.8, 0.9])
    assert perfect.high == 1.0 and perfect.low is not None and perfect.low < 0.6
    rng = np.random.default_rng(1)
    y, s = _binormal(rng, 20, 20, 3.0)
    ci = iv.auc_interval(y, s)
    assert ci.low is not None and ci.high is not None and 0.0 < ci.low < ci.high < 1.0


def test_delong_paired_equals_naive_covariance() -> None:
    rng = np.random.default_rng(2)
    y, s_a = _binormal(rng, 50, 70, 1.0)
    s_b = s_a + rng.normal(0, 0.8, s_a.size)
    test = iv.delong_paired(y, s_a, s_b)
    auc_a, v10a, v01a = _naive_components(y, s_a)
    auc_b, v10b, v01b = _naive_components(y, s_b)
    var = np.var(v10a - v10b, ddof=1) / 50 + np.var(v01a - v01b, ddof=1) / 70
    assert test.diff == pytest.approx(auc_a - auc_b, abs=1e-12)
    assert test.interval.high - test.interval.low == pytest.approx(
        2 * 1.959963984540054 * np.sqrt(var), abs=1e-9)
    assert test.method == "DeLong paired" and test.p_value is not None
    assert iv.delong_paired(y, s_a, s_a).p_value == 1.0


# --- McNemar -----------------------------------------------------------------------------


@pytest.mark.parametrize(("b", "c"), [(0, 0), (3, 10), (10, 3), (0, 7), (25, 25), (40, 61)])
def test_mcnemar_exact_is_scipys_binomial_test_and_mid_p_its_formula(b: int, c: int) -> None:
    n = b + c
    exact = binomtest(b, n, 0.5).pvalue if n else 1.0
    assert iv.mcnemar(b, c, mid_p=False) == pytest.approx(exact)
    if n:
        low = min(b, c)

        from scipy.stats import binom
        mid = min(1.0, 2 * (binom.cdf(low, n, 0.5) - 0.5 * binom.pmf(low, n, 0.5)))
        assert iv.mcnemar(b, c) == pytest.approx(mid)
        assert iv.mcnemar(b, c) <= iv.mcnemar(b, c, mid_p=False)


def test_mcnemar_paired_difference_and_counts() -> None:
    a = np.array([1] * 30 + [1] * 12 + [0] * 4 + [0] * 54, dtype=bool)
    b = np.array([1] * 30 + [0] * 12 + [1] * 4 + [0] * 54, dtype=bool)
    test = iv.mcnemar_paired(a, b)
    assert test.diff == pytest.approx(0.08)
    assert test.p_value == pytest.approx(iv.mcnemar(12, 4))
    assert test.interval.low is not None and test.interval.high is not None
    assert test.interval.low < 0.08 < test.interval.high
    assert test.interval.method == "Newcombe"


# --- corrections, power, median ----------------------------------------------------------


def test_holm_by_hand_and_bh_against_scipy() -> None:
    p = [0.01, None, 0.04, 0.03, 0.005]
    # sorted: .005*4=.02, .01*3=.03, .03*2=.06, .04*1=.04 -> monotone .06
    assert iv.holm(p) == [pytest.approx(0.03), None, pytest.approx(0.06), pytest.approx(0.06),
                          pytest.approx(0.02)]
    bh = iv.benjamini_hochberg(p)
    expected = false_discovery_control([0.01, 0.04, 0.03, 0.005], method="bh")
    assert [bh[0], bh[2], bh[3], bh[4]] == pytest.approx(list(expected))
    assert bh[1] is None and iv.holm([]) == []


def test_detectable_difference_is_z_sum_times_se() -> None:
    assert iv.detectable_difference(0.01) == pytest.approx((1.959964 + 0.841621) * 0.01)
    assert iv.detectable_difference(None) is None


def test_median_interval_order_statistics() -> None:
    values = np.arange(1.0, 11.0)  # n = 10: P(B <= 1) = 0.0107 <= .025 < P(B <= 2)
    ci = iv.median_interval(values)
    assert (ci.low, ci.high, ci.method) == (2.0, 9.0, "order statistic")
    assert iv.median_interval([1.0, 2.0, 3.0]).low is None


# --- clustered bootstrap -----------------------------------------------------------------


def test_bootstrap_reproducible_with_seed_and_differs_with_another() -> None:
    rng = np.random.default_rng(0)
    v = rng.normal(size=300)
    clusters = np.repeat(np.arange(100), 3)
    one = iv.ClusteredBootstrap(clusters, reps=200, seed=1).interval(*iv.mean_columns(v), 0.0)
    two = iv.ClusteredBootstrap(clusters, reps=200, seed=1).interval(*iv.mean_columns(v), 0.0)
    other = iv.ClusteredBootstrap(clusters, reps=200, seed=2).interval(*iv.mean_columns(v), 0.0)
    assert one == two and one != other and one.method == "bootstrap"


def test_ece_columns_reproduce_the_reports_ece() -> None:
    rng = np.random.default_rng(4)
    y = rng.integers(0, 2, 500)
    s = np.clip(rng.random(500) * 1.02, 0, 1)
    columns, statistic = iv.ece_columns(y, s, 10)
    assert statistic(columns.sum(axis=0)[None, :])[0] == pytest.approx(scores.ece(y, s, 10))


# --- against an independent DeLong (MLstatkit, installed for the tests only) ---------------


@pytest.mark.parametrize("decimals", [None, 1])  # continuous scores, then many ties
def test_delong_variance_and_paired_test_equal_mlstatkit(decimals: int | None) -> None:
    from MLstatkit import Delong_test

    rng = np.random.default_rng(11)
    y, s_a = _binormal(rng, 80, 120, 1.0)
    s_b = s_a + rng.normal(0.0, 0.7, s_a.size)
    if decimals is not None:
        s_a, s_b = np.round(s_a, decimals), np.round(s_b, decimals)
    z_ba, p_value, ci_a, ci_b, auc_a, auc_b, info = Delong_test(y, s_a, s_b)
    assert info["method"] == "delong"
    z = 1.959963984540054
    for run, auc, ci in ((s_a, auc_a, ci_a), (s_b, auc_b, ci_b)):
        ours_auc, ours_var = iv.delong(y, run)
        assert ours_auc == pytest.approx(auc, abs=1e-12)
        assert ci[0] > 0.0 and ci[1] < 1.0  # not clipped, so its half width gives the variance
        assert ours_var == pytest.approx(((ci[1] - ci[0]) / (2 * z)) ** 2, abs=1e-9)
    paired = iv.delong_paired(y, s_a, s_b)
    assert paired.diff == pytest.approx(auc_a - auc_b, abs=1e-12)
    assert paired.p_value == pytest.approx(p_value, abs=1e-6)
    assert paired.interval.high is not None and paired.interval.low is not None
    assert ((paired.interval.high - paired.interval.low) / (2 * z)) ** 2 == pytest.approx(
        info["var_diff"], abs=1e-9)
    assert (paired.diff or 0.0) / np.sqrt(info["var_diff"]) == pytest.approx(-z_ba, abs=1e-6)


def test_multinomial_resamples_keep_the_number_of_decisions() -> None:
    clusters = np.repeat(np.arange(50), 3)
    boot = iv.ClusteredBootstrap(clusters, reps=300, seed=0)
    per_decision = np.where(np.arange(150) % 3 == 0, 1.0, 0.0)  # one 1 per decision
    totals = boot.sums(per_decision)[:, 0]
    assert boot.method == "multinomial" and np.all(totals == 50)
    rows = boot.sums(np.ones(150))[:, 0]
    assert np.all(rows == 150)  # whole decisions move: 3 rows each


def test_poisson_resamples_above_20000_decisions_are_reproducible() -> None:
    rng = np.random.default_rng(8)
    clusters = rng.permutation(np.arange(60_000) % 25_000)
    values = rng.normal(size=60_000)
    boot = iv.ClusteredBootstrap(clusters, reps=60, seed=4)
    first = boot.sums(iv.mean_columns(values)[0])
    again = iv.ClusteredBootstrap(clusters, reps=60, seed=4).sums(iv.mean_columns(values)[0])
    assert boot.method == "Poisson" and np.array_equal(first, again)
    assert np.array_equal(boot.sums(iv.mean_columns(values)[0]), first)  # kept counts
    decisions = first[:, 1] / 2.4  # 2.4 rows per decision on average
    assert abs(float(np.mean(decisions)) / 25_000 - 1.0) < 0.01  # Poisson(1): mean 1 each


def test_bootstrap_batch_equals_one_by_one_and_subset_matches_a_fresh_one() -> None:
    rng = np.random.default_rng(6)
    clusters = np.repeat(np.arange(120), 2)
    y = rng.integers(0, 2, 240)
    s = rng.random(240)
    boot = iv.ClusteredBootstrap(clusters, reps=200, seed=3)
    figures = [(*iv.mean_columns((s - y) ** 2), 0.2), (*iv.ece_columns(y, s, 10), 0.1),
               (*iv.mean_columns(s), None)]
    batch = boot.intervals(figures)
    for together, alone in zip(batch[:2], (boot.interval(*f) for f in figures[:2]), strict=True):
        # the same resamples; float32 products round alike to 1e-9
        assert (together.low, together.high) == (
            pytest.approx(alone.low, rel=1e-9), pytest.approx(alone.high, rel=1e-9))
    assert batch[2].low is None  # a figure that does not exist has no interval
    cell = clusters < 60
    assert boot.subset(cell).interval(*iv.mean_columns(s[cell]), 0.5) == iv.ClusteredBootstrap(
        clusters[cell], reps=200, seed=3).interval(*iv.mean_columns(s[cell]), 0.5)


def test_paired_bootstrap_finds_a_real_difference_and_not_a_null_one() -> None:
    rng = np.random.default_rng(12)
    clusters = np.repeat(np.arange(300), 2)
    base = rng.normal(size=600)
    better = base - 0.3 + rng.normal(0, 0.1, 600)
    same = base + rng.normal(0, 0.1, 600)
    boot = iv.ClusteredBootstrap(clusters, reps=1000, seed=0)
    mean = iv.ratio_statistic()
    real, null = boot.paired_many([
        (iv.mean_columns(base)[0], iv.mean_columns(better)[0], mean),
        (iv.mean_columns(base)[0], iv.mean_columns(same)[0], mean)])
    assert real.diff == pytest.approx(float(np.mean(base - better)))
    assert real.p_value is not None and real.p_value < 0.01
    assert real.interval.low is not None and real.interval.low > 0
    assert null.p_value is not None and null.p_value > 0.05
    assert null.detectable is not None and 0 < null.detectable < 0.05
    assert real.method == "paired bootstrap"


def test_hostile_inputs_are_refused_with_a_message() -> None:
    with pytest.raises(ValueError, match="finite"):
        iv.ClusteredBootstrap([0, 1]).interval(*iv.mean_columns([1.0, float("nan")]), 0.5)
    with pytest.raises(ValueError, match="one row per"):
        iv.ClusteredBootstrap([0, 1]).sums(np.ones(3))
    with pytest.raises(ValueError, match="level"):
        iv.wilson(1, 2, level=1.5)
    with pytest.raises(ValueError, match="0 or 1"):
        iv.delong([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="p-values"):
        iv.holm([0.5, 1.2])
    assert iv.ClusteredBootstrap([]).interval(*iv.mean_columns([]), 0.5).low is None


def test_ratio_columns_resample_numerator_and_base_together() -> None:
    rng = np.random.default_rng(9)
    clusters = np.repeat(np.arange(200), 2)
    positive = rng.random(400) < 0.4
    hit = positive & (rng.random(400) < 0.7)
    columns, statistic = iv.ratio_columns(hit, positive)
    assert statistic(columns.sum(axis=0)[None, :])[0] == pytest.approx(hit.sum() / positive.sum())
    ci = iv.ClusteredBootstrap(clusters, reps=500).interval(columns, statistic, 0.7)
    assert ci.low is not None and ci.high is not None and ci.low < 0.7 < ci.high
    with pytest.raises(ValueError, match="differ in shape"):
        iv.ratio_columns([1.0], [1.0, 2.0])


def test_a_question_in_every_decision_shares_the_resamples_of_the_whole() -> None:
    rng = np.random.default_rng(10)
    clusters = np.repeat(np.arange(30_000), 2)  # two questions per decision
    values = rng.normal(size=60_000)
    first_question = np.arange(60_000) % 2 == 0
    boot = iv.ClusteredBootstrap(clusters, reps=40, seed=2)
    part = boot.subset(first_question)
    only_first = np.where(first_question, values, 0.0)
    assert part.reps == 40 and np.allclose(part.sums(values[first_question]),
                                           boot.sums(only_first), rtol=1e-9)
    cell = boot.subset(clusters < 100)  # fewer decisions: a draw of its own
    assert cell.n_clusters == 100 and cell.method == "multinomial"


def test_a_report_lets_go_of_the_memoized_resamples() -> None:
    """A long-lived process (``dreads serve``'s report pages) keeps no resample counts between
    reports: ``release_resamples`` empties the memo every figure of one report shares."""
    boot = iv.ClusteredBootstrap(np.arange(300) % 100, reps=50, seed=3)
    columns, statistic = iv.mean_columns(np.linspace(0, 1, 300))
    first = boot.interval(columns, statistic, 0.5)
    assert iv._resample_counts.cache_info().currsize >= 1
    iv.release_resamples()
    assert iv._resample_counts.cache_info().currsize == 0
    again = iv.ClusteredBootstrap(np.arange(300) % 100, reps=50, seed=3)
    assert again.interval(columns, statistic, 0.5) == first
