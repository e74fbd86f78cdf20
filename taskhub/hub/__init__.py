"""Tasksets and results on the Hugging Face Hub: scaffold, publish, describe, profile, pull.

Everything that leaves the machine goes in one commit with ``parentCommit`` set to the head it
was built against, so a push is all or nothing and two concurrent pushes cannot clobber each
other (the Hub answers 412 to the later one, which is retried or reported). Results are
redacted before they are serialized: API-key shapes (``sk-…``, ``hf_…``, ``Bearer …``, JWTs,
cloud keys), values under secret-named keys, and the exact values of secrets passed in by the
caller. A value that cannot be inspected (an opaque encoded blob) stops the push: redaction
fails closed.

``huggingface_hub``, ``pyarrow`` and ``datasets`` are imported inside the functions that need
them, so ``import taskhub`` stays light.
"""

from __future__ import annotations

from taskhub.hub._common import PushResult, is_secret_name
from taskhub.hub._environment import (
    EnvironmentDeclaration,
    environment_declaration,
    read_environment,
)
from taskhub.hub._eval_results import eval_result, push_eval_results, results_url
from taskhub.hub._profile import ProfileResult, profile_taskset
from taskhub.hub._redact import REDACTED, RedactionReport, Redactor, RunRedactor, redact_run
from taskhub.hub._results import pull_results, push_results
from taskhub.hub._tasksets import (
    SplitInfo,
    TasksetInfo,
    check_taskset,
    describe_taskset,
    init_taskset,
    push_taskset,
)

__all__ = [
    "REDACTED",
    "EnvironmentDeclaration",
    "ProfileResult",
    "PushResult",
    "RedactionReport",
    "Redactor",
    "RunRedactor",
    "SplitInfo",
    "TasksetInfo",
    "check_taskset",
    "describe_taskset",
    "environment_declaration",
    "eval_result",
    "init_taskset",
    "is_secret_name",
    "profile_taskset",
    "push_eval_results",
    "pull_results",
    "push_results",
    "push_taskset",
    "read_environment",
    "redact_run",
    "results_url",
]
