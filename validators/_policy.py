"""The severity policy: a versioned data file mapping each check id to fail, warn or advisory.

Checks have no opinion on how much their failure weighs: they report ``pass``/``fail``/``skip``/
``error``, and the policy alone turns a list of results into a verdict and a score (RFC 008's
rule). The policy is data (``policies/<name>-<version>.json``), so a hub can pin, diff and
publish it. ``taskhub-v2`` (the default) carries RFC 008's severity policy v2; ``taskhub-v1``
is kept so that old reports can be read against the policy that judged them.

The score is one number from 0 to 100 that submissions can be compared by::

    score = 100 * sum(weight of each passed check) / sum(weight of each counted check)

where a check's weight is the policy's ``score`` weight of its severity (fail 3, warn 2,
advisory 1 in ``taskhub-v2``). Counted are the checks that passed, failed or errored, and the
checks skipped because something they needed did not pass (``measured.blocked_by``): an env
that does not start loses every check it kept from running. Checks that do not apply (no
model was given, a URL has no files to read, an id no taskhub check implements) are not
counted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib.resources import files
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from taskhub import CheckLevel, CheckResult, ConfigError, Lane, Severity, ValidationReport, Verdict

_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)

#: The policy used when none is named.
DEFAULT_POLICY = "taskhub-v2"
#: Severity of a check id the policy does not list (a third-party check, say).
UNLISTED_SEVERITY: Severity = "warn"
#: Verdicts ranked from best to worst (the batch summary sorts by this).
VERDICT_RANK: dict[Verdict, int] = {"pass": 0, "warn": 1, "fail": 2, "unsupported": 3, "error": 4}
#: Exit code of each verdict.
EXIT_CODES: dict[Verdict, int] = {"pass": 0, "warn": 0, "fail": 1, "unsupported": 2, "error": 3}


class PolicyEntry(BaseModel):
    """What one check id weighs."""

    model_config = _MODEL_CONFIG

    level: CheckLevel
    """The check's level (``static``, ``runtime``...)."""
    severity: Severity
    """``fail``: a failure fails the env. ``warn``: it makes the verdict ``warn``.
    ``advisory``: it is reported and changes nothing."""
    lane: Lane = "local"
    """RFC 008's lane: ``local`` (an author can run and fix it) or ``hub`` (only an operator
    runs it: the statistical level, cross-host and publishing checks)."""
    rfc008: bool = False
    """The id is one of RFC 008's (OpenEnv's severity policy lists it), not taskhub's own."""
    legacy_manifest: Severity | None = None
    """Severity instead of ``severity`` when the env's openenv.yaml was written before the
    ``validation:`` block existed (it has none): the declaration the check looks for had no
    place to go, so its absence is a warning saying what to add, not a failure."""
    unimplemented: str | None = None
    """Why taskhub reports this id as ``skip`` when no registered check implements it."""


class ScoreWeights(BaseModel):
    """Weight of a check in the score, by the severity it carries."""

    model_config = _MODEL_CONFIG

    fail: float = 3.0
    """Weight of a ``fail``-severity check."""
    warn: float = 2.0
    """Weight of a ``warn``-severity check."""
    advisory: float = 1.0
    """Weight of an ``advisory`` check."""


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
    score: ScoreWeights = Field(default_factory=ScoreWeights)
    """Weights of the score (see the module's documentation)."""
    checks: dict[str, PolicyEntry]
    """Severity of every known check id."""

    @property
    def label(self) -> str:
        """``name-version``, the string ``--policy`` takes."""
        return f"{self.name}-{self.version}"

    def severity(
        self, check_id: str, default: Severity | None = None, *, legacy_manifest: bool = False
    ) -> Severity:
        """Return the severity of ``check_id`` (``default``, else ``UNLISTED_SEVERITY``).

        Args:
            check_id: The check.
            default: Severity of an id the policy does not list.
            legacy_manifest: The env's openenv.yaml has no ``validation:`` block (it predates
                it): an entry's ``legacy_manifest`` severity applies.
        """
        entry = self.checks.get(check_id)
        if entry is None:
            return default or UNLISTED_SEVERITY
        if legacy_manifest and entry.legacy_manifest is not None:
            return entry.legacy_manifest
        return entry.severity

    def unimplemented(self, implemented: Iterable[str], lane: Lane) -> list[CheckResult]:
        """Skip results for the policy's ids in ``lane`` that no check implements.

        Args:
            implemented: Ids of the registered checks.
            lane: The lane of the run: ``local`` leaves out the hub lane's ids.
        """
        have = set(implemented)
        return [
            CheckResult(
                id=check_id,
                level=entry.level,
                status="skip",
                severity=entry.severity,
                summary=f"not implemented: {entry.unimplemented}",
                measured={"not_implemented": True},
            )
            for check_id, entry in self.checks.items()
            if entry.unimplemented
            and check_id not in have
            and (lane == "hub" or entry.lane == "local")
        ]

    def weight(self, severity: Severity) -> float:
        """The score weight of a check of ``severity``."""
        return float(getattr(self.score, severity))

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


def blocked_by(result: CheckResult) -> str | None:
    """The check whose failure kept ``result`` from running, when it is such a skip."""
    if result.status != "skip":
        return None
    blocker = result.measured.get("blocked_by")
    return blocker if isinstance(blocker, str) and blocker else None


def counts_in_score(result: CheckResult) -> bool:
    """A result the score counts: it ran, or it was kept from running by a failure."""
    return result.status != "skip" or blocked_by(result) is not None


def score_of(checks: Iterable[CheckResult], policy: Policy) -> float:
    """The report's score from 0 to 100 (see the module's documentation); 0 when none count."""
    total = earned = 0.0
    for result in checks:
        if not counts_in_score(result):
            continue
        weight = policy.weight(result.severity)
        total += weight
        if result.status == "pass":
            earned += weight
    return round(100.0 * earned / total, 1) if total else 0.0


#: Checks whose result says whether an env could be started.
STARTUP_CHECK = "runtime.startup"
#: Checks that only run on a played episode: one that ran means an episode was played.
EPISODE_CHECKS = (
    "protocol.episode",
    "runtime.state_contract",
    "runtime.seed_control",
    "runtime.episode_determinism",
    "runtime.termination",
    "runtime.reward_well_formed",
)


def reached(report: ValidationReport) -> Literal["played", "started", "none"]:
    """How far validation got with the env: an episode was played, it only started, or not.

    ``played``: ``protocol.episode`` passed, or a check that needs a played episode ran (it
    passed or failed). ``started``: the server answered (``runtime.startup`` passed).
    """
    status = {c.id: c.status for c in report.checks}
    if status.get("protocol.episode") == "pass" or any(
        status.get(c) in ("pass", "fail") for c in EPISODE_CHECKS[1:]
    ):
        return "played"
    if status.get(STARTUP_CHECK) == "pass":
        return "started"
    return "none"


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
