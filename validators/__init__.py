"""Auto-validation of OpenEnv environments: RFC 008's checks, a severity policy, batch runs.

``validate_async(target)`` runs every registered check against an env folder, a built-in env,
a running server's URL or a git source, and returns a ``ValidationReport`` whose verdict the
severity policy gives. ``validate_batch_async`` does it for many submissions side by side,
each in its own process under a deadline, and writes one report per submission plus a ranked
summary (the env-quality board).
"""

from __future__ import annotations

from ._batch import (
    BatchConfig,
    Submission,
    read_submissions,
    summary_rows,
    validate_batch,
    validate_batch_async,
)
from ._check import CheckSpec, Finding, check, failed, passed, registered_checks, skipped
from ._config import ValidationConfig
from ._driver import EnvDriver, Trajectory
from ._policy import DEFAULT_POLICY, Policy, load_policy, policy_files
from ._render import render_report
from ._subject import EnvDescription, Product, Subject
from ._validate import validate, validate_async

__all__ = [
    "BatchConfig",
    "CheckSpec",
    "DEFAULT_POLICY",
    "EnvDescription",
    "EnvDriver",
    "Finding",
    "Policy",
    "Product",
    "Subject",
    "Submission",
    "Trajectory",
    "ValidationConfig",
    "check",
    "failed",
    "load_policy",
    "passed",
    "policy_files",
    "read_submissions",
    "registered_checks",
    "render_report",
    "skipped",
    "summary_rows",
    "validate",
    "validate_async",
    "validate_batch",
    "validate_batch_async",
]
