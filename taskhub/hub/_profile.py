"""Profiles: per-task statistics from runs, written back into a new revision of the taskset."""

from __future__ import annotations

import csv
import json
import logging
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from taskhub._errors import ConfigError, ResultsError
from taskhub._results import read_manifest
from taskhub._results_table import read_results_table
from taskhub._schema import MEASURED_FIELDS, RunManifest
from taskhub._taskset import data_files, load_taskset, read_card
from taskhub.hub._common import PROFILE_HEADER, PushResult, render_readme, split_readme
from taskhub.hub._tasksets import push_taskset

logger = logging.getLogger(__name__)


@dataclass
class _Tally:
    episodes: int = 0
    judged: int = 0
    successes: int = 0
    reward_sum: float = 0.0


@dataclass(frozen=True)
class ProfileResult:
    """A profiled taskset: where it was written and, when pushed, where it landed."""

    folder: Path
    """The profiled taskset folder."""
    profiles: dict[str, dict[str, Any]]
    """Each profiled task's measured columns (``pass_rate``, ``difficulty``, ``profile``), by
    task id."""
    models: list[str]
    """The models whose runs were used."""
    push: PushResult | None = None
    """The Hub commit, when the profile was pushed."""


def _task_profiles(
    runs: Sequence[tuple[RunManifest, Path]],
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Per task, per model: pass rate, mean reward and episodes, from the runs' columns."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    by_model: dict[str, list[pa.Table]] = {}
    for manifest, run_dir in runs:
        table = read_results_table(run_dir, columns=["task_id", "reward", "success"])
        # infra and reward errors are nobody's score
        by_model.setdefault(manifest.model.spec, []).append(
            table.filter(table["reward"].is_valid())
        )
    tallies: dict[str, dict[str, _Tally]] = defaultdict(dict)
    for model, tables in by_model.items():
        table = pa.concat_tables(tables).combine_chunks()
        if table.num_rows == 0:
            continue
        encoded = pc.dictionary_encode(table["task_id"]).chunk(0)
        codes = encoded.indices.to_numpy()
        tasks = len(encoded.dictionary)
        judged = table["success"].is_valid().to_numpy(zero_copy_only=False)
        success = pc.fill_null(table["success"], False).to_numpy(zero_copy_only=False)
        # bincount adds in file order, as a running sum over the records would
        sums = np.bincount(codes, weights=table["reward"].to_numpy(), minlength=tasks).tolist()
        episodes = np.bincount(codes, minlength=tasks).tolist()
        judges = np.bincount(codes, weights=judged, minlength=tasks).astype(int).tolist()
        wins = np.bincount(codes, weights=judged & success, minlength=tasks).astype(int).tolist()
        for i, task_id in enumerate(encoded.dictionary.to_pylist()):
            tallies[task_id][model] = _Tally(episodes[i], judges[i], wins[i], sums[i])
    profiles: dict[str, dict[str, Any]] = {}
    for task_id, models in tallies.items():
        pass_rate = {m: t.successes / t.judged for m, t in sorted(models.items()) if t.judged}
        mean_reward = {m: t.reward_sum / t.episodes for m, t in sorted(models.items())}
        overall = round(sum(pass_rate.values()) / len(pass_rate), 6) if pass_rate else None
        profiles[task_id] = {
            "pass_rate": overall,
            "difficulty": None if overall is None else round(1.0 - overall, 6),
            "profile": {
                "pass_rate": pass_rate,
                "mean_reward": mean_reward,
                "episodes": {m: t.episodes for m, t in sorted(models.items())},
            },
        }
    return profiles, list(dict.fromkeys(manifest.model.spec for manifest, _ in runs))


def _with_profile(row: dict[str, Any], profiles: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The row with its measured columns set (or dropped, when the runs did not score it)."""
    updated = {k: v for k, v in row.items() if k not in MEASURED_FIELDS}
    updated.update(profiles.get(str(row.get("task_id")), {}))
    return updated


def _objects_as_text(row: dict[str, Any]) -> dict[str, Any]:
    """The row with its ``metadata`` and ``profile`` objects as JSON text (table formats)."""
    return {
        k: json.dumps(v, ensure_ascii=False)
        if k in ("metadata", "profile") and isinstance(v, dict)
        else v
        for k, v in row.items()
    }


def _rewrite_data_file(path: Path, profiles: Mapping[str, dict[str, Any]]) -> None:
    if path.suffix in (".jsonl", ".json"):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json" and text.lstrip().startswith("["):
            rows = [_with_profile(r, profiles) for r in json.loads(text)]
            path.write_text(json.dumps(rows, ensure_ascii=False, indent=1) + "\n", "utf-8")
            return
        lines = [
            json.dumps(_with_profile(json.loads(line), profiles), ensure_ascii=False)
            for line in text.splitlines()
            if line.strip()
        ]
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    elif path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table_rows = pq.read_table(path).to_pylist()
        updated = []
        for row in table_rows:
            # nested objects as JSON text keep heterogeneous rows in one Arrow schema
            updated.append(_objects_as_text(_with_profile(row, profiles)))
        pq.write_table(pa.Table.from_pylist(updated), path)
    elif path.suffix == ".csv":
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            fields = list(reader.fieldnames or [])
            csv_rows = list(reader)
        fields += [name for name in ("pass_rate", "difficulty", "profile") if name not in fields]
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            for row in csv_rows:
                raw = {k: v for k, v in row.items() if v not in ("", None)}
                writer.writerow(_objects_as_text(_with_profile(raw, profiles)))


def profile_taskset(
    run_dirs: Sequence[str | Path],
    *,
    output: str | Path | None = None,
    repo_id: str | None = None,
    branch: str | None = None,
    tag: str | None = None,
    token: str | None = None,
) -> ProfileResult:
    """Write per-task statistics of evaluation runs back into a new revision of their taskset.

    Each task that the runs scored gets three new columns: ``pass_rate`` (the mean over the
    models), ``difficulty`` (1 minus it) and ``profile`` (``pass_rate``, ``mean_reward`` and
    ``episodes`` per model). They are measurements, not part of the task: its content hash does
    not change. Columns from an earlier profile are replaced. The README header records the
    runs used under ``taskhub_profile``.

    Args:
        run_dirs: Run directories, all on the same taskset content (any splits, any models).
        output: Folder to write the profiled taskset to (a temporary one when pushing only).
        repo_id: Hub repo to push the profiled taskset to; for runs on a Hub taskset, None with
            no ``output`` pushes to the taskset's own repo.
        branch: Branch to push to (``main`` by default). It must still be at the commit the
            runs used, so the profile cannot undo later commits.
        tag: Tag to create at the new commit.
        token: Hub token with write access.

    Returns:
        The profiled folder, the profiles, and the push.

    Raises:
        ResultsError: No runs, or runs on different tasksets.
        TasksetError: The taskset cannot be loaded again or the push fails.
    """
    if not run_dirs:
        raise ResultsError("taskset profile needs at least one run directory")
    # manifests and a few columns: the runs' records are never all held at once
    runs = [(read_manifest(Path(d)), Path(d)) for d in run_dirs]
    refs = {manifest.taskset.fingerprint: (manifest, path) for manifest, path in runs}
    if len(refs) > 1:
        listing = ", ".join(
            f"{path} ({manifest.taskset.source}, {fp[:12]})"
            for fp, (manifest, path) in refs.items()
        )
        raise ResultsError(f"the runs are on different tasksets or revisions: {listing}")
    ref = runs[0][0].taskset
    if ref.kind == "hub" and ref.repo_id and ref.commit_sha:
        taskset = load_taskset(ref.repo_id, revision=ref.commit_sha, token=token)
    else:
        taskset = load_taskset(ref.path or ref.source)
    if taskset.ref.fingerprint != ref.fingerprint or not taskset.ref.path:
        raise ResultsError(
            f"taskset {ref.source!r} changed since the runs (fingerprint {ref.fingerprint[:12]} "
            f"-> {taskset.ref.fingerprint[:12]}); profile runs of the current revision"
        )
    source_folder = Path(taskset.ref.path)
    if not source_folder.is_dir():
        raise ResultsError(
            f"taskset {ref.source!r} is a single data file; turn it into a folder with "
            "`taskhub taskset init` before profiling"
        )
    profiles, models = _task_profiles(runs)
    known = {t.task_id for tasks in taskset.splits.values() for t in tasks}
    profiles = {k: v for k, v in profiles.items() if k in known}
    push_repo = repo_id
    if push_repo is None and output is None:
        if ref.kind != "hub" or not ref.repo_id:
            raise ConfigError(
                "the runs used a local taskset: pass an output folder (--output) or a repo"
            )
        push_repo = ref.repo_id
    staging = Path(output) if output is not None else Path(tempfile.mkdtemp(prefix="taskhub-prof-"))
    if staging.exists() and any(staging.iterdir()):
        raise ConfigError(f"{staging} exists and is not empty")
    staging.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source_folder, staging, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".*"))
    header, _ = read_card(staging)
    for paths in data_files(staging, header).values():
        for path in paths:
            _rewrite_data_file(path, profiles)
    readme = staging / "README.md"
    if readme.is_file():
        full_header, body = split_readme(readme.read_text(encoding="utf-8"))
        full_header[PROFILE_HEADER] = {
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "taskset_commit": ref.commit_sha,
            "models": models,
            "runs": [manifest.run_id for manifest, _ in runs],
            "profiled_tasks": len(profiles),
        }
        readme.write_text(render_readme(full_header, body), encoding="utf-8")
    load_taskset(str(staging))  # the profiled folder must still be a valid taskset
    pushed = None
    if push_repo is not None:
        same_repo = ref.kind == "hub" and push_repo == ref.repo_id
        pushed = push_taskset(
            staging,
            push_repo,
            branch=branch,
            tag=tag,
            token=token,
            commit_message=f"Profile {len(profiles)} tasks from {len(runs)} run(s)",
            parent_commit=ref.commit_sha if same_repo else None,
        )
    return ProfileResult(staging, profiles, models, pushed)
