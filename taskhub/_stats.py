"""Statistics of a run: means with standard errors and confidence intervals, pass@k.

Pure Python (no numpy/scipy on the import path); the Student t quantile comes from a table for
small samples and the normal quantile beyond it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from statistics import NormalDist

# Two-sided 95% Student t critical values, t_{0.975, df}, df = 1..30.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = NormalDist().inv_cdf(0.975)


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
        sums: dict[Hashable, list[float]] = {}
        for value, cluster in zip(values, clusters, strict=True):
            sums.setdefault(cluster, []).append(value - mean)
        if 1 < len(sums) < n:
            stderr, low, high = clustered_interval(
                mean, n, [math.fsum(group) for group in sums.values()]
            )
            return mean, stderr, low, high
    if n == 1:
        return mean, None, None, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    stderr = math.sqrt(variance / n)
    half = t_critical_95(n - 1) * stderr
    return mean, stderr, mean - half, mean + half


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


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    """Return the 95% Wilson score interval of a proportion (good at 0%, 100% and small n)."""
    if n == 0:
        return None, None
    p = successes / n
    z2 = _Z975**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z975 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


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
