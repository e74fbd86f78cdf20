"""The estimators of taskhub._stats against reference implementations, on hand-made data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

from taskhub._stats import (
    bounded_mean_ci,
    mcnemar_exact,
    mean_ci,
    paired_difference,
    t_critical_95,
    wilson_interval,
)

# Hand-made data: a 0-1 reward with a few values at the bounds, on tasks with 1 to 3 samples.
VALUES = [0.0, 0.0, 0.25, 1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.75, 0.0]
TASKS = ["a", "a", "b", "c", "c", "c", "d", "e", "f", "g", "g", "h"]


def reference_bounded(values: list[float], tasks: list[str] | None, low: float, high: float):
    """The same interval built from statsmodels' Wilson interval and scipy's t quantile."""
    mean, stderr, _, _ = mean_ci(values, tasks)
    assert mean is not None and stderr is not None
    units = len(set(tasks)) if tasks is not None and len(set(tasks)) < len(values) else len(values)
    t = stats.t.ppf(0.975, units - 1)
    z = stats.norm.ppf(0.975)
    p = (mean - low) / (high - low)
    n_eff = p * (1 - p) / (stderr / (high - low)) ** 2 if 0 < p < 1 else units
    # Korn and Graubard's degrees-of-freedom adjustment, then the Wilson interval at 95%
    n_adj = n_eff * (z / t) ** 2
    lo, hi = proportion_confint(p * n_adj, n_adj, alpha=0.05, method="wilson")
    return low + (high - low) * lo, low + (high - low) * hi


@pytest.mark.parametrize("clustered", [False, True], ids=["iid", "by-task"])
def test_bounded_interval_matches_statsmodels_wilson_on_the_effective_size(
    clustered: bool,
) -> None:
    tasks = TASKS if clustered else None
    _, _, low, high = bounded_mean_ci(VALUES, tasks, 0.0, 1.0)
    ref_low, ref_high = reference_bounded(VALUES, tasks, 0.0, 1.0)
    # the t table has three decimals: the quantiles agree to 5e-4
    assert low == pytest.approx(ref_low, abs=2e-4)
    assert high == pytest.approx(ref_high, abs=2e-4)


def test_bounded_interval_stays_in_range_where_the_t_interval_does_not() -> None:
    # one success in eleven: the t interval leaves [0, 1], the bounded one does not
    values = [1.0] + [0.0] * 10
    _, _, t_low, _ = mean_ci(values)
    _, _, low, high = bounded_mean_ci(values, None, 0.0, 1.0)
    assert t_low is not None and t_low < 0
    assert low is not None and high is not None and 0.0 <= low < 1 / 11 < high <= 1.0


def test_bounded_interval_of_a_scaled_range_is_the_unit_interval_scaled() -> None:
    scaled = [2 + 3 * v for v in VALUES]
    _, _, low, high = bounded_mean_ci(scaled, TASKS, 2.0, 5.0)
    _, _, unit_low, unit_high = bounded_mean_ci(VALUES, TASKS, 0.0, 1.0)
    assert (low, high) == pytest.approx((2 + 3 * unit_low, 2 + 3 * unit_high))  # type: ignore[operator]


def test_bounded_interval_at_a_bound_uses_the_number_of_tasks() -> None:
    # ten tasks all at 0, two samples each: [0, t^2 / (10 + t^2)] with t of 9 df
    values = [0.0] * 20
    tasks = [f"t{i // 2}" for i in range(20)]
    mean, _, low, high = bounded_mean_ci(values, tasks, 0.0, 1.0)
    t = stats.t.ppf(0.975, 9)
    assert (mean, low) == (0.0, 0.0)
    assert high == pytest.approx(t**2 / (10 + t**2), abs=2e-4)
    # and all at the top: the mirror image
    _, _, low, high = bounded_mean_ci([1.0] * 20, tasks, 0.0, 1.0)
    assert high == 1.0 and low == pytest.approx(10 / (10 + t**2), abs=2e-4)


def test_bounded_interval_edge_cases() -> None:
    assert bounded_mean_ci([], None, 0, 1) == (None, None, None, None)
    assert bounded_mean_ci([0.5], None, 0, 1) == (0.5, None, None, None)
    assert bounded_mean_ci([0.5, 0.5, 0.5], None, 0, 1)[2:] == (0.5, 0.5)
    with pytest.raises(ValueError, match="low < high"):
        bounded_mean_ci([0.5], None, 1, 1)


def test_binary_rewards_far_from_the_bounds_agree_with_the_t_interval() -> None:
    rng = np.random.default_rng(3)
    values = rng.integers(0, 2, 400).astype(float).tolist()
    _, _, t_low, t_high = mean_ci(values)
    _, _, low, high = bounded_mean_ci(values, None, 0.0, 1.0)
    assert (low, high) == pytest.approx((t_low, t_high), abs=2e-3)


@pytest.mark.parametrize("df", [1, 2, 5, 10, 29, 30, 31, 45, 120, 1000])
def test_t_quantiles_match_scipy(df: int) -> None:
    assert t_critical_95(df) == pytest.approx(stats.t.ppf(0.975, df), abs=6e-4)


def test_mean_ci_matches_scipy_t_interval() -> None:
    mean, stderr, low, high = mean_ci(VALUES)
    ref = stats.ttest_1samp(VALUES, 0.0).confidence_interval(0.95)
    assert stderr == pytest.approx(stats.sem(VALUES))
    assert (low, high) == pytest.approx((ref.low, ref.high), abs=5e-4)
    assert mean == pytest.approx(np.mean(VALUES))


def test_a_large_clustered_mean_ci_matches_statsmodels_cluster_robust_errors() -> None:
    # 20k values on 5k tasks: task codes (ints) take the vectorised grouping, the same tasks
    # named by strings the Python loop; both are statsmodels' cluster-robust standard error.
    import statsmodels.api as sm

    rng = np.random.default_rng(7)
    codes = np.repeat(np.arange(5000), 4)
    rng.shuffle(codes)
    values = np.clip(rng.normal(0.4, 0.3, codes.size) + codes % 7 / 20, 0, 1)
    fit = sm.OLS(values, np.ones(codes.size)).fit(cov_type="cluster", cov_kwds={"groups": codes})
    by_code = mean_ci(values.tolist(), codes.tolist())
    by_name = mean_ci(values.tolist(), [f"task-{c}" for c in codes.tolist()])
    assert by_code[1] == pytest.approx(float(fit.bse[0]), rel=1e-9)
    assert by_code == pytest.approx(by_name, rel=1e-12)
    with pytest.raises(ValueError, match="20000 values but 19999 clusters"):
        mean_ci(values.tolist(), codes.tolist()[:-1])


def test_wilson_matches_statsmodels() -> None:
    for successes, n in [(0, 10), (3, 8), (10, 10), (47, 120)]:
        ref = proportion_confint(successes, n, alpha=0.05, method="wilson")
        assert wilson_interval(successes, n) == pytest.approx(ref, abs=1e-12)


def test_paired_difference_matches_scipy_paired_t_test() -> None:
    a = {"t1": 0.0, "t2": 0.5, "t3": 1.0, "t4": 0.25, "t5": 0.0, "only-a": 1.0}
    b = {"t1": 1.0, "t2": 0.5, "t3": 1.0, "t4": 0.75, "t5": 1.0, "only-b": 0.0}
    diff, stderr, low, high, shared = paired_difference(a, b)
    keys = ["t1", "t2", "t3", "t4", "t5"]
    result = stats.ttest_rel([b[k] for k in keys], [a[k] for k in keys])
    ci = result.confidence_interval(0.95)
    assert shared == 5
    assert diff == pytest.approx(0.5)
    assert (low, high) == pytest.approx((ci.low, ci.high), abs=5e-4)
    assert stderr == pytest.approx(0.5 / result.statistic)


@pytest.mark.parametrize(
    ("only_a", "only_b"), [(0, 0), (0, 5), (1, 9), (4, 6), (12, 3), (30, 45), (200, 260)]
)
def test_mcnemar_exact_matches_statsmodels(only_a: int, only_b: int) -> None:
    table = [[7, only_a], [only_b, 11]]
    expected = mcnemar(table, exact=True).pvalue
    assert mcnemar_exact(only_a, only_b) == pytest.approx(expected, rel=1e-9)
    assert not math.isnan(mcnemar_exact(only_a, only_b))
