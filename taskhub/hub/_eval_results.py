"""Evaluation results in model repos: ``.eval_results/<taskset>.yaml`` in the Hub's format.

The Hub shows a model's scores on its page and aggregates them into the benchmark dataset's
leaderboard from YAML files under ``.eval_results/`` of the model repo, each a list of
results::

    - dataset:
        id: org/arith-mini          # the benchmark: the taskset's Hub dataset
        task_id: test               # the split evaluated
        config: default
        split: test
        revision: 5503434d...       # the taskset commit the run pinned
      value: 0.95                   # the metric
      date: '2026-01-02T03:04:05+00:00'
      source:                       # where the numbers come from: the results dataset
        url: https://huggingface.co/datasets/org/results/tree/<sha>/runs/<run_id>
        name: taskhub results
        user: org
      notes: mean reward; config 1a2b3c4d5e6f7a8b; rewards exact, fuzzy=0.5

One file per configuration (``taskhub.comparability``): a taskset scored another way gets its
own file, ``<taskset>_<fingerprint>.yaml``, beside ``<taskset>.yaml``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import yaml

from taskhub._comparability import comparability
from taskhub._errors import ResultsError
from taskhub._results import SUMMARY_COLUMNS, RunSummary, read_manifest, summarize
from taskhub._results_table import read_results_table
from taskhub._schema import RunManifest
from taskhub.hub._common import (
    PushResult,
    check_repo_id,
    http_status,
    hub_errors,
    require_token,
    whoami,
)

logger = logging.getLogger(__name__)

FOLDER = ".eval_results"
#: Metrics a result can report.
METRICS = ("mean_reward", "success_rate", "pass@1")
_NAMES = {"mean_reward": "mean reward", "success_rate": "success rate", "pass@1": "pass@1"}


def metric_value(summary: RunSummary, metric: str) -> float:
    """The value of ``metric`` in a run's summary.

    Raises:
        ResultsError: The metric is unknown or the run has no value for it.
    """
    if metric == "mean_reward":
        value = summary.mean_reward
    elif metric == "success_rate":
        value = summary.success_rate
    elif metric.startswith("pass@"):
        value = summary.pass_at_k.get(metric)
    else:
        raise ResultsError(f"unknown metric {metric!r}: use one of {', '.join(METRICS)}")
    if value is None:
        raise ResultsError(f"the run has no {metric} (no episode was scored)")
    return value


def eval_result(
    manifest: RunManifest,
    summary: RunSummary,
    *,
    metric: str = "mean_reward",
    source_url: str | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    """One entry of an ``.eval_results`` file for a run.

    Raises:
        ResultsError: The taskset was not loaded from the Hub (the benchmark must be a Hub
            dataset), or the run has no value for ``metric``.
    """
    taskset = manifest.taskset
    if taskset.kind != "hub" or not taskset.repo_id or not taskset.commit_sha:
        raise ResultsError(
            f"taskset {taskset.name!r} of run {manifest.run_id} was not loaded from the Hub: an "
            "evaluation result names its benchmark as a Hub dataset at a commit. Publish it "
            "(taskhub taskset push) and evaluate ORG/NAME@REVISION"
        )
    config = comparability(manifest)
    dataset = {
        "id": taskset.repo_id,
        "task_id": manifest.split,
        "config": "default",
        "split": manifest.split,
        "revision": taskset.commit_sha,
    }
    entry: dict[str, Any] = {
        "dataset": dataset,
        "value": round(metric_value(summary, metric), 4),
    }
    moment = manifest.finished_at or manifest.updated_at
    entry["date"] = moment.isoformat()
    if source_url is not None:
        source: dict[str, str] = {"url": source_url, "name": "taskhub results"}
        if user:
            source["user"] = user
        entry["source"] = source
    entry["notes"] = (
        f"{_NAMES.get(metric, metric)}; config {config.fingerprint}; rewards "
        f"{config.reward_label}; n={summary.n_rewarded}"
    )
    return entry


def results_path(manifest: RunManifest, existing: dict[str, str]) -> str:
    """The file of a run's configuration: ``<taskset>.yaml``, or ``<taskset>_<fingerprint>.yaml``.

    The second when another configuration already holds the first.

    Args:
        manifest: The run.
        existing: Contents of the model repo's ``.eval_results`` files, by path.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", manifest.taskset.name).strip("-") or "taskset"
    fingerprint = comparability(manifest).fingerprint
    plain = f"{FOLDER}/{name}.yaml"
    text = existing.get(plain)
    if text is None or f"config {fingerprint};" in text:
        return plain
    return f"{FOLDER}/{name}_{fingerprint}.yaml"


def results_url(repo_id: str, commit: str, run_id: str) -> str:
    """The page of a run in a results dataset at a commit (the source of a result)."""
    from huggingface_hub import constants

    return f"{constants.ENDPOINT}/datasets/{repo_id}/tree/{commit}/runs/{run_id}"


def push_eval_results(
    run_dir: str | Path,
    model_repo: str,
    *,
    metric: str = "mean_reward",
    source_url: str | None = None,
    branch: str | None = None,
    token: str | None = None,
) -> PushResult:
    """Write a run's result into a model repo's ``.eval_results/`` as one commit.

    Args:
        run_dir: The run directory (its taskset must come from the Hub).
        model_repo: ``org/name`` of the model repo (created when missing).
        metric: ``mean_reward``, ``success_rate`` or ``pass@1``.
        source_url: Where the run's episodes are (its results dataset), shown as the source.
        branch: Branch to commit to (created from ``main`` when missing); ``main`` by default.
        token: Hub token with write access (huggingface_hub's own ``HF_TOKEN`` otherwise).

    Returns:
        The commit.

    Raises:
        ResultsError: The run is not readable or its taskset not on the Hub, there is no usable
            token, or the Hub refused the push.
    """
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    manifest = read_manifest(Path(run_dir))
    check_repo_id(model_repo, ResultsError)
    table = read_results_table(Path(run_dir), columns=SUMMARY_COLUMNS)  # columns, not records
    summary = summarize(table, n_planned=manifest.n_planned, comparability=comparability(manifest))
    resolved = require_token(token, "eval results push", ResultsError)
    api = HfApi(token=resolved)
    what = f"eval results push to {model_repo}"
    user = whoami(api, what, ResultsError)
    entry = eval_result(manifest, summary, metric=metric, source_url=source_url, user=user)
    branch = branch or "main"
    with hub_errors(what, ResultsError):
        api.create_repo(model_repo, repo_type="model", exist_ok=True)
        refs = api.list_repo_refs(model_repo, repo_type="model")
        if branch not in {b.name for b in refs.branches}:
            api.create_branch(model_repo, branch=branch, repo_type="model")
        head = api.model_info(model_repo, revision=branch).sha
        files = api.list_repo_files(model_repo, repo_type="model", revision=head)
        existing = {}
        for path in files:
            if path.startswith(f"{FOLDER}/") and path.endswith((".yaml", ".yml")):
                local = hf_hub_download(
                    model_repo, path, repo_type="model", revision=head, token=resolved
                )
                existing[path] = Path(local).read_text(encoding="utf-8")
    path = results_path(manifest, existing)
    text = yaml.safe_dump([entry], sort_keys=False, allow_unicode=True, width=100)
    with hub_errors(what, ResultsError):
        try:
            info = api.create_commit(
                model_repo,
                [CommitOperationAdd(path, text.encode())],
                commit_message=f"Add {manifest.taskset.name} evaluation result",
                repo_type="model",
                revision=branch,
                parent_commit=head,
            )
        except Exception as exc:
            if http_status(exc) == 412:
                raise ResultsError(
                    f"{what}: branch {branch!r} moved while pushing; nothing was pushed: push again"
                ) from None
            raise
    logger.info("wrote %s to %s@%s", path, model_repo, branch)
    return PushResult(model_repo, str(info.oid), branch, None, str(info.commit_url), (path,))
