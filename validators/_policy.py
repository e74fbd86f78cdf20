"""The severity policy: a versioned data file mapping each check id to fail, warn or advisory.

Checks have no opinion on how much their failure weighs: they report ``pass``/``fail``/``skip``/
``error``, and the policy alone turns a list of results into a verdict (RFC 008's rule). The
policy is data (``policies/<name>-<version>.json``), so a hub can pin, diff and publish it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from taskhub import CheckResult, ConfigError, Severity, Verdict

_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)

#: The policy used when none is named.
DEFAULT_POLICY = "taskhub-v1"
#: Severity of a check id the policy does not list (a third-party check, say).
UNLISTED_SEVERITY: Severity = "warn"
#: Verdicts ranked from best to worst (the batch summary sorts by this).
VERDICT_RANK: dict[Verdict, int] = {"pass": 0, "warn": 1, "fail": 2, "unsupported": 3, "error": 4}
#: Exit code of each verdict.
EXIT_CODES: dict[Verdict, int] = {"pass": 0, "warn": 0, "fail": 1, "unsupported": 2, "error": 3}


class PolicyEntry(BaseModel):
    """What one check id weighs."""

    model_config = _MODEL_CONFIG

    level: str
    """The check's level (``static``, ``runtime``...), for readers of the policy."""
    severity: Severity
    """``fail``: a failure fails the env. ``warn``: it makes the verdict ``warn``.
    ``advisory``: it is reported and changes nothing."""


class VerdictRules(BaseModel):
    """How statuses other than pass and fail count."""

    model_config = _MODEL_CONFIG

    skip: Literal["ignore", "warn"] = "ignore"
    """``ignore``: a skipped check changes nothing (it did not apply or was not asked for).
    ``warn``: any skip makes the verdict at best ``warn`` (RFC 008's local rule)."""
    error: Literal["fail_closed", "ignore"] = "fail_closed"
    """``fail_closed``: a check that could not run counts as failed at its severity."""


class PolicyBounds(BaseModel):
    """Limits on what an env may declare, and thresholds of the measured checks."""

    model_config = _MODEL_CONFIG

    max_oracle_tolerance: float = 0.1
    """Largest ``oracle_tolerance`` a manifest may declare."""
    min_floor_margin: float = 0.1
    """Smallest ``floor_margin`` a manifest may declare (and the margin used when none is)."""
    max_variance_tolerance: float = 0.2
    """Largest ``variance_tolerance`` a manifest may declare (and the bound used when none is)."""
    max_episode_timeout_s: float = 3600.0
    """Largest ``episode_timeout_s`` a manifest may declare."""
    max_episode_steps: int = 500
    """A do-nothing episode must end by itself within this many steps."""
    canary_tolerance: float = 0.25
    """Canaries may score at most the floor plus this fraction of the reward range, on average."""
    max_step_latency_p99_s: float = 5.0
    """Slowest acceptable 99th percentile of step latency."""
    max_rss_growth_mb_per_100_episodes: float = 20.0
    """Server memory growth per 100 episodes above which it leaks."""
    min_rss_growth_mb: float = 8.0
    """Total growth below which memory measurements are noise."""
    min_training_signal: float = 0.1
    """Smallest mean GRPO group signal ``1 - p^G - (1-p)^G`` worth training on."""
    default_reward_range: tuple[float, float] = (0.0, 1.0)
    """Reward range assumed when the manifest declares none (RFC 008's default)."""


class Policy(BaseModel):
    """A versioned severity policy."""

    model_config = _MODEL_CONFIG

    name: str
    """Policy family (``taskhub``)."""
    version: str
    """Version within the family (``v1``); reports record both."""
    description: str = ""
    """What the policy is."""
    verdict: VerdictRules = Field(default_factory=VerdictRules)
    """How skips and errors count."""
    bounds: PolicyBounds = Field(default_factory=PolicyBounds)
    """Declaration limits and measurement thresholds."""
    checks: dict[str, PolicyEntry]
    """Severity of every known check id."""

    @property
    def label(self) -> str:
        """``name-version``, the string ``--policy`` takes."""
        return f"{self.name}-{self.version}"

    def severity(self, check_id: str, default: Severity | None = None) -> Severity:
        """Return the severity of ``check_id`` (``default``, else ``UNLISTED_SEVERITY``)."""
        entry = self.checks.get(check_id)
        if entry is not None:
            return entry.severity
        return default or UNLISTED_SEVERITY

    def verdict_of(self, results: Iterable[CheckResult]) -> Verdict:
        """Turn check results into a verdict: ``fail``, ``warn`` or ``pass``.

        A failed ``fail``-severity check fails the env; a failed ``warn`` check makes it
        ``warn``; ``advisory`` failures change nothing. Errors and skips count as the
        ``verdict`` rules say.
        """
        verdict: Verdict = "pass"
        for result in results:
            status = result.status
            if status == "error" and self.verdict.error == "fail_closed":
                status = "fail"
            if status == "skip" and self.verdict.skip == "warn":
                verdict = "warn" if verdict == "pass" else verdict
            if status != "fail":
                continue
            if result.severity == "fail":
                return "fail"
            if result.severity == "warn":
                verdict = "warn"
        return verdict


def policy_files() -> dict[str, Path]:
    """Return the policies shipped with taskhub, by ``name-version``."""
    folder = files("taskhub.validators").joinpath("policies")
    return {
        Path(str(p)).stem: Path(str(p))
        for p in folder.iterdir()
        if str(p).endswith(".json") and p.is_file()
    }


def load_policy(name_or_path: str = DEFAULT_POLICY) -> Policy:
    """Load a policy by ``name-version`` (``taskhub-v1``) or from a JSON file.

    Raises:
        ConfigError: No such policy, or the file is not a valid policy.
    """
    path = Path(name_or_path)
    if not (path.suffix == ".json" and path.is_file()):
        shipped = policy_files()
        if name_or_path not in shipped:
            raise ConfigError(
                f"unknown severity policy {name_or_path!r}; shipped: {', '.join(sorted(shipped))} "
                "(or give the path of a policy .json file)"
            )
        path = shipped[name_or_path]
    try:
        return Policy.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{path} is not a valid severity policy: {exc}") from None
