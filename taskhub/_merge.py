"""Merging run directories: the shards of one evaluation, run apart, made one run again.

Shards run by hand (``--shard i/n`` as a SLURM array, a Kubernetes indexed job, Hugging Face
Jobs) each leave a run directory. ``merge_runs`` checks that they are parts of one evaluation
(same taskset commit and content, model and sampling, reward specs, env, seed and episode
settings), keeps one record per ``(task_id, sample)``, and writes a new run directory that reads
as one run: its manifest is the unsharded configuration, every record carries the merged run
id, and ``--resume`` on it runs whatever episodes no shard wrote.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskhub._errors import ResultsError, TaskhubError
from taskhub._results import (
    EPISODES,
    MANIFEST,
    ResultsWriter,
    RunSummary,
    iter_results,
    read_manifest,
    summarize,
    write_manifest,
)
from taskhub._runner import _slug, select_tasks
from taskhub._schema import EpisodeRecord, RunManifest, RunStatus
from taskhub._taskset import load_taskset
from taskhub._version import __version__


@dataclass(frozen=True)
class MergeResult:
    """What ``merge_runs`` wrote."""

    run_dir: Path
    """The merged run directory."""
    manifest: RunManifest
    """Its manifest."""
    summary: RunSummary
    """Its summary."""
    duplicates: int
    """Records left out because another shard had the same ``(task_id, sample)``."""


def _env_identity(manifest: RunManifest) -> dict[str, Any] | None:
    env = manifest.env
    if env is None:
        return None
    metadata = env.metadata or {}
    return {
        "kind": env.kind,
        # a folder's path differs from machine to machine; what it serves does not
        "spec": None if env.kind == "folder" else env.spec,
        "name": metadata.get("name"),
        "version": metadata.get("version"),
        "action_schema": env.action_schema,
    }


def _identity(manifest: RunManifest) -> dict[str, Any]:
    """What must be equal for two runs to be parts of one evaluation, by the name shown."""
    config, taskset = manifest.config, manifest.taskset
    return {
        "taskset": (taskset.kind, taskset.repo_id, taskset.name),
        "taskset commit": taskset.commit_sha,
        "taskset content (fingerprint)": taskset.fingerprint,
        "split": manifest.split,
        "model": manifest.model.spec,
        "sampling": manifest.model.sampling.model_dump(mode="json"),
        "reward specs": [p.model_dump(mode="json") for p in manifest.rewards],
        "success threshold": manifest.success_threshold,
        "env": _env_identity(manifest),
        "seed": config.seed,
        "samples per task": config.samples,
        "task limit": config.limit,
        "step limit": config.max_steps,
        "format retries": config.format_retries,
        "shard count": config.shard[1] if config.shard else None,
    }


def _check_agree(manifests: Sequence[tuple[Path, RunManifest]]) -> None:
    first_dir, first = manifests[0]
    reference = _identity(first)
    for run_dir, manifest in manifests[1:]:
        for aspect, value in _identity(manifest).items():
            if value != reference[aspect]:
                raise ResultsError(
                    f"cannot merge {first_dir} and {run_dir}: they differ in {aspect} "
                    f"({reference[aspect]!r} vs {value!r}). Only shards of one evaluation "
                    "merge: the same taskset commit, model and sampling, reward specs, env, "
                    "seed and episode settings"
                )


def _rank(record: EpisodeRecord) -> tuple[bool, datetime]:
    # Of two records of one episode (a shard run twice), a result beats an infra error, and
    # the later attempt beats the earlier.
    return (record.outcome != "infra_error", record.started_at)


def _new_run_id(manifest: RunManifest) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return (
        f"{stamp}-{_slug(manifest.taskset.name, 24)}-{_slug(manifest.model.spec, 32)}"
        f"-merged-{secrets.token_hex(3)}"
    )


def _n_planned(manifests: Sequence[RunManifest], *, hub_token: str | None) -> int:
    """Episodes of the whole evaluation: each shard counted once, or the taskset counted.

    When every shard ``i/n`` is there their plans add up; when some are missing, the pinned
    taskset is loaded (as ``--resume`` does) to count the tasks the unsharded run plans.
    """
    by_shard: dict[tuple[int, int] | None, int] = {}
    for manifest in manifests:
        shard = manifest.config.shard
        by_shard[shard] = max(by_shard.get(shard, 0), manifest.n_planned)
    first = manifests[0]
    count = first.config.shard[1] if first.config.shard else 1
    if len(by_shard) == count:
        return sum(by_shard.values())
    ref = first.taskset
    source = ref.source
    if ref.kind == "hub" and ref.repo_id and ref.commit_sha:
        source = f"{ref.repo_id}@{ref.commit_sha}"
    try:
        taskset = load_taskset(source, token=hub_token)
    except TaskhubError as exc:
        missing = sorted(set(range(count)) - {s[0] for s in by_shard if s is not None})
        raise ResultsError(
            f"shards {', '.join(f'{i}/{count}' for i in missing)} are missing and the taskset "
            f"{ref.source!r} that would count their episodes cannot be loaded ({exc}); merge "
            "every shard, or merge where the taskset loads"
        ) from None
    config = first.config.model_copy(update={"shard": None})
    return len(select_tasks(taskset, config)[1]) * config.samples


def merge_runs(
    run_dirs: Sequence[Path | str],
    output: Path | str,
    *,
    run_id: str | None = None,
    argv: list[str] | None = None,
    hub_token: str | None = None,
) -> MergeResult:
    """Merge the run directories of one evaluation's shards into one run directory.

    Args:
        run_dirs: The shards' run directories (at least one). A shard given twice, or run
            twice, is fine: one record per ``(task_id, sample)`` is kept, a result rather than
            an infra error, else the later one.
        output: The merged run directory to create (must not hold a run yet).
        run_id: Id of the merged run (a fresh one when None).
        argv: The command line, recorded in ``run.json``.
        hub_token: Token for a private Hub taskset (loaded only to count the episodes of
            missing shards).

    Returns:
        The merged directory, its manifest and summary, and how many duplicates were left out.

    Raises:
        ResultsError: A folder is not a run directory, ``output`` already holds a run, or the
            runs are not shards of one evaluation (the message names the first difference).
    """
    if not run_dirs:
        raise ResultsError("nothing to merge: give at least one run directory")
    target = Path(output)
    if (target / MANIFEST).exists():
        raise ResultsError(f"{target} already holds a run; merge into a new directory")
    dirs = [Path(d) for d in run_dirs]
    for run_dir in dirs:
        if run_dir.resolve() == target.resolve():
            raise ResultsError(f"{target} is one of the runs being merged; merge elsewhere")
    manifests = [(run_dir, read_manifest(run_dir)) for run_dir in dirs]
    _check_agree(manifests)
    first = manifests[0][1]

    # Pass 1: which copy of each episode is kept (only keys in memory, not records).
    best: dict[tuple[str, int], tuple[tuple[bool, datetime], int, int]] = {}
    total = 0
    for index, run_dir in enumerate(dirs):
        for line, record in enumerate(iter_results(run_dir)):
            total += 1
            candidate = (_rank(record), index, line)
            kept = best.get(record.key())
            if kept is None or candidate[0] > kept[0]:
                best[record.key()] = candidate
    chosen = {(index, line) for _, index, line in best.values()}

    merged_id = run_id or _new_run_id(first)
    n_planned = _n_planned([m for _, m in manifests], hub_token=hub_token)
    target.mkdir(parents=True, exist_ok=True)
    if (target / EPISODES).exists():
        raise ResultsError(f"{target} already holds {EPISODES}; merge into a new directory")
    rows: list[EpisodeRecord] = []
    # Pass 2: write the kept records under the merged run's id, in the order the runs were given.
    with ResultsWriter(target / EPISODES) as writer:
        for index, run_dir in enumerate(dirs):
            for line, record in enumerate(iter_results(run_dir)):
                if (index, line) not in chosen:
                    continue
                record = record.model_copy(update={"run_id": merged_id})
                writer.write(record)
                rows.append(
                    record.model_copy(
                        update={
                            "steps": [],
                            "messages": [],
                            "initial_observation": None,
                            "reset_payload": {},
                        }
                    )
                )
    now = datetime.now(UTC)
    status: RunStatus = "completed" if len(rows) >= n_planned else "interrupted"
    env = first.env
    if env is not None:
        urls = list(dict.fromkeys(u for _, m in manifests if m.env for u in m.env.urls))
        env = env.model_copy(update={"urls": urls})
    manifest = first.model_copy(
        update={
            "run_id": merged_id,
            "taskhub_version": __version__,
            "status": status,
            "created_at": min(m.created_at for _, m in manifests),
            "updated_at": now,
            "finished_at": now if status == "completed" else None,
            "config": first.config.model_copy(update={"shard": None}),
            "env": env,
            "n_planned": n_planned,
            "argv": argv,
            "sessions": sorted({s for _, m in manifests for s in m.sessions}),
            "parent_run": None,
            "merged_from": [m.run_id for _, m in manifests],
        }
    )
    write_manifest(target, manifest)
    return MergeResult(
        run_dir=target,
        manifest=manifest,
        summary=summarize(rows, n_planned=n_planned),
        duplicates=total - len(rows),
    )
