"""Statistics of a run: means with standard errors and confidence intervals, pass@k, pairs.

Every function takes columns (values, the task of each value, successes...) rather than
episode records, so that the same code serves a list of records and an Arrow table of a
million rows. Pure Python (no numpy/scipy on the import path); the Student t quantile comes
from a table for small samples and an expansion around the normal quantile beyond it.

Methods (each checked against scipy or statsmodels in tests/taskhub/test_stats.py):

- ``mean_ci``: Student t interval, cluster-robust by task when tasks have several samples.
- ``bounded_mean_ci``: for a reward with a known range, the Wilson score interval on the
  effective sample size of Korn and Graubard (1998): the mean is rescaled to ``p`` in [0, 1],
  ``n_eff = p (1 - p) / SE^2`` with the (cluster-robust) standard error of ``mean_ci``, and the
  normal quantile is replaced by the t quantile of ``mean_ci`` (their degrees-of-freedom
  adjustment, ``n_eff (z / t)^2``). It stays inside the range, is the t interval's width far
  from the bounds and Wilson's shape near them (all tasks at 0 give ``[0, t^2 / (C + t^2)]``).
- ``paired_difference``: the mean over shared tasks of the per-task difference of means, with
  the t interval over tasks (the paired t test of ``scipy.stats.ttest_rel``).
- ``mcnemar_exact``: McNemar's exact test (two-sided binomial test of the discordant pairs).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from statistics import NormalDist
from typing import TypeVar

# Two-sided 95% Student t critical values, t_{0.975, df}, df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = NormalDist().inv_cdf(0.975)
K = TypeVar("K", bound=Hashable)


def t_critical_95(df: int) -> float:
    """Return the two-sided 95% Student t critical value for ``df`` degrees of freedom.

    Exact (3 decimals) up to df=30; above, the Cornish-Fisher expansion around the normal
    quantile, accurate to about 1e-4.
    """
    if df < 1:
        return math.inf
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def mean_ci(
    values: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float | None, float | None, float | None, float | None]:
    """Return ``(mean, standard error, ci_low, ci_high)`` of ``values`` (95%, Student t).

    With ``clusters`` (the task of each value) and some task holding several values (samples),
    the standard error is cluster-robust: samples of one task are not independent draws, so
    the variance comes from the per-task sums of deviations,
    ``C / (C - 1) * sum_c (sum_{i in c} (x_i - mean))^2 / n^2``, and the t quantile has
    ``C - 1`` degrees of freedom (C tasks). With one value per task this is the usual i.i.d.
    formula, which is also used when every value comes from one task (its samples). With one
    value the spread is unknown: standard error and interval are None.
    """
    n = len(values)
    if n == 0:
        return None, None, None, None
    mean = math.fsum(values) / n
    if clusters is not None:
        sums = _deviation_sums(values, clusters, mean)
        if 1 < len(sums) < n:
            stderr, low, high = clustered_interval(mean, n, sums)
            return mean, stderr, low, high
    if n == 1:
        return mean, None, None, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    stderr = math.sqrt(variance / n)
    half = t_critical_95(n - 1) * stderr
    return mean, stderr, mean - half, mean + half


#: From this many values on, ``_deviation_sums`` groups integer clusters with numpy (imported
#: then, by callers that hold a run's columns already): a Python loop over a million values
#: takes seconds.
_VECTOR_MIN = 10_000


def _deviation_sums(
    values: Sequence[float], clusters: Sequence[Hashable], mean: float
) -> list[float]:
    """The sum of ``x - mean`` over each cluster's values (one per cluster, in any order)."""
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} clusters")
    if len(values) >= _VECTOR_MIN and type(clusters[0]) is int:
        import numpy as np

        codes = np.asarray(clusters)
        if codes.dtype.kind in "iu":  # task codes, as summaries pass them
            _, inverse = np.unique(codes, return_inverse=True)
            deviations = np.asarray(values, dtype=np.float64) - mean
            sums: list[float] = np.bincount(inverse, weights=deviations).tolist()
            return sums
    groups: dict[Hashable, list[float]] = {}
    for value, cluster in zip(values, clusters, strict=True):
        groups.setdefault(cluster, []).append(value - mean)
    return [math.fsum(group) for group in groups.values()]


def clustered_interval(
    mean: float, n: int, deviation_sums: Sequence[float]
) -> tuple[float, float, float]:
    """Return ``(standard error, ci_low, ci_high)`` from per-cluster sums of ``x_i - mean``.

    Args:
        mean: The mean of all ``n`` values.
        n: Number of values.
        deviation_sums: One sum per cluster (at least two clusters).
    """
    c = len(deviation_sums)
    variance = c / (c - 1) * math.fsum(d * d for d in deviation_sums) / (n * n)
    stderr = math.sqrt(variance)
    half = t_critical_95(c - 1) * stderr
    return stderr, mean - half, mean + half


def _units(clusters: Sequence[Hashable] | None, n: int) -> int:
    """The number of independent draws ``mean_ci`` uses: tasks when clustered, else values."""
    if clusters is None:
        return n
    count = len(set(clusters))
    return count if 1 < count < n else n


def bounded_mean_ci(
    values: Sequence[float],
    clusters: Sequence[Hashable] | None,
    low: float,
    high: float,
) -> tuple[float | None, float | None, float | None, float | None]:
    """Return ``(mean, standard error, ci_low, ci_high)`` of values known to lie in [low, high].

    The mean and standard error are ``mean_ci``'s; the 95% interval is the Wilson score interval
    on Korn and Graubard's effective sample size (see the module docstring), so it never leaves
    ``[low, high]``. When every value is at one bound (no spread to estimate), the effective
    size is the number of independent draws (tasks, or values); when all values are equal
    inside the range, the interval is that value.

    Raises:
        ValueError: ``low`` is not below ``high``.
    """
    if not low < high:
        raise ValueError(f"a range needs low < high, got [{low}, {high}]")
    mean, stderr, ci_low, _ = mean_ci(values, clusters)
    if mean is None or stderr is None or ci_low is None:
        return mean, stderr, None, None
    width = high - low
    p = min(1.0, max(0.0, (mean - low) / width))
    se = stderr / width
    units = _units(clusters, len(values))
    quantile = t_critical_95(units - 1)
    if p in (0.0, 1.0) or se == 0.0:
        if 0.0 < p < 1.0:
            return mean, stderr, mean, mean
        n_eff = float(units)
    else:
        n_eff = p * (1.0 - p) / (se * se)
    lo, hi = _wilson(p, n_eff, quantile)
    return mean, stderr, low + width * lo, low + width * hi


def _wilson(p: float, n: float, q: float) -> tuple[float, float]:
    q2 = q * q
    centre = (p + q2 / (2 * n)) / (1 + q2 / n)
    half = q * math.sqrt(p * (1 - p) / n + q2 / (4 * n * n)) / (1 + q2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def interval(
    values: Sequence[float],
    clusters: Sequence[Hashable] | None,
    bounds: tuple[float, float] | None,
) -> tuple[float | None, float | None, float | None, float | None]:
    """``bounded_mean_ci`` when the range is known, else ``mean_ci``."""
    if bounds is not None:
        return bounded_mean_ci(values, clusters, bounds[0], bounds[1])
    return mean_ci(values, clusters)


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    """Return the 95% Wilson score interval of a proportion (good at 0%, 100% and small n)."""
    if n == 0:
        return None, None
    return _wilson(successes / n, n, _Z975)


def success_interval(
    outcomes: Sequence[float], clusters: Sequence[Hashable]
) -> tuple[float | None, float | None]:
    """Return the 95% interval of a success rate (``outcomes`` are 1.0 or 0.0, one per episode).

    Several tasks, some with several samples: the cluster-robust t interval of ``mean_ci``,
    clipped to [0, 1]. Otherwise (one episode per task, or one task): the Wilson interval.
    """
    n = len(outcomes)
    if 1 < len(set(clusters)) < n:
        _, _, low, high = mean_ci(outcomes, clusters)
        if low is not None and high is not None:
            return max(0.0, low), min(1.0, high)
    return wilson_interval(int(math.fsum(outcomes)), n)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with ``c`` successes in ``n`` samples (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)``, computed as a product to stay exact for large n.

    Raises:
        ValueError: ``k`` is not in 1..n or ``c`` not in 0..n.
    """
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples (n={n})")
    if not 0 <= c <= n:
        raise ValueError(f"successes c={c} must be in 0..n={n}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def paired_difference(
    a: Mapping[K, float], b: Mapping[K, float]
) -> tuple[float | None, float | None, float | None, float | None, int]:
    """Paired difference ``b - a`` over the tasks both sides have (each a task's mean).

    Each task counts once: the estimate is the mean of the per-task differences, its standard
    error and 95% interval the Student t ones over tasks (``C - 1`` degrees of freedom), as
    ``scipy.stats.ttest_rel(b, a)`` gives them. Samples of a task are averaged first, so the
    interval is clustered by task, as the run summary's is.

    Args:
        a: Per-task means of one side, by task id.
        b: Per-task means of the other side.

    Returns:
        ``(difference, standard error, ci_low, ci_high, shared tasks)``; the interval is None
        with fewer than two shared tasks.
    """
    shared = [task for task in a if task in b]
    diffs = [b[task] - a[task] for task in shared]
    mean, stderr, low, high = mean_ci(diffs)
    return mean, stderr, low, high, len(shared)


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided p-value of McNemar's exact test.

    ``only_a`` pairs succeeded on one side only, ``only_b`` on the other only; under the null
    hypothesis each discordant pair is a fair coin, so the p-value is the two-sided binomial
    tail ``min(1, 2 P[X <= min(only_a, only_b)])`` with ``X ~ Bin(only_a + only_b, 1/2)``
    (``statsmodels.stats.contingency_tables.mcnemar(exact=True)``). No discordant pair: 1.

    Raises:
        ValueError: A count is negative.
    """
    if only_a < 0 or only_b < 0:
        raise ValueError(f"counts must be >= 0, got {only_a} and {only_b}")
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    log_half = n * math.log(0.5)
    log_comb = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(k + 1)
    ]
    top = max(log_comb)
    tail = math.exp(top + log_half) * math.fsum(math.exp(c - top) for c in log_comb)
    return min(1.0, 2.0 * tail)
