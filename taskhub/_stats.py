"""Statistics of a run: means with standard errors and confidence intervals, pass@k.

Pure Python (no numpy/scipy on the import path); the Student t quantile comes from a table for
small samples and the normal quantile beyond it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
) -> tuple[float | None, float | None, float | None, float | None]:
    """Return ``(mean, standard error, ci_low, ci_high)`` of ``values`` (95%, Student t).

    With one value the spread is unknown: standard error and interval are None.
    """
    n = len(values)
    if n == 0:
        return None, None, None, None
    mean = math.fsum(values) / n
    if n == 1:
        return mean, None, None, None
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    stderr = math.sqrt(variance / n)
    half = t_critical_95(n - 1) * stderr
    return mean, stderr, mean - half, mean + half


def wilson_interval(successes: int, n: int) -> tuple[float | None, float | None]:
    """Return the 95% Wilson score interval of a proportion (good at 0%, 100% and small n)."""
    if n == 0:
        return None, None
    p = successes / n
    z2 = _Z975**2
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = _Z975 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


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
