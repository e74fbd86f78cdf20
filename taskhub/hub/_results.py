"""Results on the Hub: push a run directory to a results repo, pull runs back."""

from __future__ import annotations

import json
import logging
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from taskhub._comparability import comparability
from taskhub._errors import ResultsError, TasksetNotFound
from taskhub._results import (
    EPISODES,
    MANIFEST,
    SummaryColumns,
    iter_results,
    read_manifest,
    summarize,
    write_manifest,
    write_results,
)
from taskhub._results_table import iter_results_tables
from taskhub._schema import EpisodeRecord, RunManifest
from taskhub._taskset import quiet_downloads
from taskhub.hub._common import (
    PushResult,
    check_repo_id,
    http_status,
    hub_errors,
    render_readme,
    require_token,
    whoami,
)
from taskhub.hub._redact import RunRedactor

logger = logging.getLogger(__name__)

#: Attempts of a results push when another push lands first (HTTP 412).
PUSH_ATTEMPTS = 3
_RUN_ID = re.compile(r"^[\w.-]+$")


def _episode_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("run_id", pa.string()),
            ("episode_id", pa.string()),
            ("task_id", pa.string()),
            ("split", pa.string()),
            ("sample", pa.int64()),
            ("seed", pa.int64()),
            ("model", pa.string()),
            ("taskset", pa.string()),
            ("taskset_commit", pa.string()),
            ("outcome", pa.string()),
            ("reward", pa.float64()),
            ("success", pa.bool_()),
            ("env_reward", pa.float64()),
            ("num_steps", pa.int64()),
            ("attempts", pa.int64()),
            ("error_type", pa.string()),
            ("error_message", pa.string()),
            ("started_at", pa.string()),
            ("duration_s", pa.float64()),
            ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("reward_components", pa.string()),
            ("record", pa.string()),
        ]
    )


#: A push reads the run's records this many at a time, or this many bytes of them.
READ_ROWS = 256
READ_BYTES = 8 << 20
#: A row group of ``episodes.parquet`` is written once it holds this many episodes, or
#: records of this many characters: a push holds one group at a time, whatever the run's size.
ROW_GROUP_EPISODES = 2_000
ROW_GROUP_CHARS = 8 << 20


def _episode_row(manifest: RunManifest, record: EpisodeRecord, line: str) -> dict[str, Any]:
    """``record``'s row of ``episodes.parquet`` (``line``: its JSON)."""
    data = record.model_dump(mode="json", include={"started_at", "reward_components"})
    return {
        "run_id": record.run_id,
        "episode_id": record.episode_id,
        "task_id": record.task_id,
        "split": record.split,
        "sample": record.sample,
        "seed": record.seed,
        "model": manifest.model.spec,
        "taskset": manifest.taskset.repo_id or manifest.taskset.name,
        "taskset_commit": manifest.taskset.commit_sha,
        "outcome": record.outcome,
        "reward": record.reward,
        "success": record.success,
        "env_reward": record.env_reward,
        "num_steps": record.num_steps,
        "attempts": record.attempts,
        "error_type": record.error.type if record.error else None,
        "error_message": record.error.message if record.error else None,
        "started_at": data["started_at"],
        "duration_s": record.duration_s,
        "messages": [{"role": m.role, "content": m.content} for m in record.messages],
        "reward_components": json.dumps(data["reward_components"], ensure_ascii=False),
        "record": line,
    }


def _write_episodes(
    path: Path, manifest: RunManifest, records: Iterable[tuple[EpisodeRecord, str]]
) -> None:
    """Write ``episodes.parquet`` from (record, its JSON) pairs, a row group at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _episode_schema()
    with pq.ParquetWriter(path, schema) as writer:
        rows: list[dict[str, Any]] = []
        chars = groups = 0
        for record, line in records:
            rows.append(_episode_row(manifest, record, line))
            chars += len(line)
            if len(rows) >= ROW_GROUP_EPISODES or chars >= ROW_GROUP_CHARS:
                writer.write_table(pa.Table.from_pylist(rows, schema=schema))
                rows, chars, groups = [], 0, groups + 1
        if rows or not groups:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema))


def _run_records(run_dir: Path) -> Iterator[EpisodeRecord]:
    """The records of a run one at a time, one per episode, as ``read_run`` keeps them."""
    tables = iter_results_tables(
        run_dir, columns=["record_line"], batch_rows=READ_ROWS, block_bytes=READ_BYTES
    )
    for table in tables:
        for line in table.column("record_line").to_pylist():
            try:
                yield EpisodeRecord.model_validate_json(line)
            except ValidationError:
                for _ in iter_results(run_dir):  # raises read_run's error, the line named
                    pass
                raise


def _results_card(
    repo_id: str, manifests: Sequence[RunManifest], summaries: Mapping[str, Any]
) -> str:
    header = {
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": "train", "path": "runs/*/episodes.parquet"}],
            }
        ],
        "tags": ["taskhub", "openenv", "evaluation"],
        "pretty_name": f"taskhub results: {repo_id}",
    }
    lines = [
        f"# taskhub results: {repo_id}",
        "",
        "Evaluation runs made with [taskhub](https://github.com/huggingface/OpenEnv) over OpenEnv "
        "environments. Each run is a folder `runs/<run_id>/` holding `run.json` (configuration "
        "and provenance) and `episodes.parquet` (one row per episode; the `record` column is the "
        "full episode record as JSON). Secrets were redacted before upload.",
        "",
        "Load every run locally with `taskhub.pull_results(repo_id, revision)`.",
        "",
        "| run | model | taskset | split | episodes | mean reward | success rate |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in sorted(manifests, key=lambda m: m.run_id):
        s = summaries.get(m.run_id, {})
        taskset = m.taskset.repo_id or m.taskset.name
        if m.taskset.commit_sha:
            taskset += f"@{m.taskset.commit_sha[:12]}"
        mean = s.get("mean_reward")
        rate = s.get("success_rate")
        lines.append(
            f"| `{m.run_id}` | `{m.model.spec}` | `{taskset}` | {m.split} | "
            f"{s.get('n_episodes', '?')} | {'-' if mean is None else f'{mean:.3f}'} | "
            f"{'-' if rate is None else f'{rate:.3f}'} |"
        )
    return render_readme(header, "\n".join(lines))


def push_results(
    run_dir: str | Path,
    repo_id: str,
    *,
    token: str | None = None,
    secrets: Mapping[str, str] | None = None,
    private: bool = False,
) -> PushResult:
    """Publish a run directory to a results dataset repo, redacted, next to the runs it holds.

    The run lands in ``runs/<run_id>/`` (``run.json`` and ``episodes.parquet``), and the
    README card is regenerated so the dataset viewer shows every run's episodes. The commit is
    made against the head it was built on; when another push lands first, it is rebuilt and
    retried. A run id the repo already holds is refused.

    Args:
        run_dir: The run directory.
        repo_id: ``org/name`` of the results dataset repo (created when missing).
        token: Hub token with write access (huggingface_hub's own ``HF_TOKEN`` otherwise). It
            is redacted from the run too.
        secrets: Exact secret values by name to redact (values of secret environment variables).
        private: Create the repo private.

    Returns:
        The commit.

    Raises:
        ResultsError: The run is not readable, redaction cannot be guaranteed, the repo already
            holds the run, there is no usable token, or the Hub refused the push.
    """
    run_dir = Path(run_dir)
    run_manifest = read_manifest(run_dir)
    run_id = run_manifest.run_id
    if not _RUN_ID.match(run_id) or run_id in (".", ".."):
        raise ResultsError(
            f"run id {run_id!r} cannot be a folder name on the Hub; nothing was pushed"
        )
    check_repo_id(repo_id, ResultsError)
    resolved = require_token(token, "results push", ResultsError)
    all_secrets = dict(secrets or {})
    all_secrets.setdefault("hub token", resolved)
    # Two passes over the run's records, one at a time: every secret is learnt from them all,
    # then each is redacted and written to the parquet file, which the push uploads from disk.
    redactor = RunRedactor(run_manifest, all_secrets)
    for record in _run_records(run_dir):
        redactor.learn(record)
    manifest = redactor.manifest()
    with tempfile.TemporaryDirectory(prefix="taskhub-push-") as staging:
        episodes = Path(staging) / "episodes.parquet"
        columns = SummaryColumns()

        def redacted() -> Iterator[tuple[EpisodeRecord, str]]:
            for index, record in enumerate(_run_records(run_dir)):
                clean, line = redactor.redact(record, index)
                columns.append(clean)
                yield clean, line

        _write_episodes(episodes, manifest, redacted())
        report = redactor.report
        if report.total:
            logger.warning(
                "redacted %d secret(s) from run %s in %d field(s)",
                report.total,
                run_id,
                len(report.fields),
            )
        summary = summarize(
            columns.table(), n_planned=manifest.n_planned, comparability=comparability(manifest)
        ).model_dump(mode="json")
        return _push(repo_id, manifest, episodes, summary, resolved, private)


def _push(
    repo_id: str,
    manifest: RunManifest,
    episodes: Path,
    summary: dict[str, Any],
    token: str,
    private: bool,
) -> PushResult:
    """Commit a redacted run (``episodes``: its parquet file) and the card to ``repo_id``."""
    from huggingface_hub import CommitOperationAdd, HfApi, hf_hub_download

    run_id = manifest.run_id
    run_json = (manifest.model_dump_json(indent=2) + "\n").encode()
    api = HfApi(token=token)
    what = f"results push to {repo_id}"
    whoami(api, what, ResultsError)
    with hub_errors(what, ResultsError):
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    for attempt in range(PUSH_ATTEMPTS):
        with hub_errors(what, ResultsError):
            head = api.dataset_info(repo_id).sha
            files = api.list_repo_files(repo_id, repo_type="dataset", revision=head)
        existing = sorted(
            {f.split("/")[1] for f in files if f.startswith("runs/") and f.count("/") >= 2}
        )
        if run_id in existing:
            raise ResultsError(
                f"{repo_id} already holds a run with id {run_id!r} (at commit {str(head)[:12]}); "
                "runs are never overwritten. Nothing was pushed."
            )
        manifests = [manifest]
        summaries = {run_id: summary}
        for other in existing:
            if f"runs/{other}/{MANIFEST}" not in files:
                continue
            with hub_errors(what, ResultsError):
                local = hf_hub_download(
                    repo_id, f"runs/{other}/{MANIFEST}", repo_type="dataset", revision=head
                )
            try:
                manifests.append(RunManifest.model_validate_json(Path(local).read_bytes()))
            except ValidationError:
                logger.warning(
                    "%s: runs/%s/run.json does not validate; left off the card", repo_id, other
                )
        card = _results_card(repo_id, manifests, summaries).encode()
        operations = [
            CommitOperationAdd(f"runs/{run_id}/{MANIFEST}", run_json),
            CommitOperationAdd(f"runs/{run_id}/episodes.parquet", str(episodes)),
            CommitOperationAdd("README.md", card),
        ]
        try:
            with hub_errors(what, ResultsError):
                try:
                    info = api.create_commit(
                        repo_id,
                        operations,
                        commit_message=f"Add run {run_id}",
                        repo_type="dataset",
                        parent_commit=head,
                    )
                except Exception as exc:
                    if http_status(exc) == 412:
                        raise _StaleParent() from None
                    raise
        except _StaleParent:
            logger.info(
                "%s moved while pushing run %s; retrying (%d)", repo_id, run_id, attempt + 1
            )
            continue
        sha = str(info.oid)
        logger.info("pushed run %s to %s (%s)", run_id, repo_id, sha)
        return PushResult(
            repo_id,
            sha,
            "main",
            None,
            str(info.commit_url),
            (f"runs/{run_id}/{MANIFEST}", f"runs/{run_id}/episodes.parquet", "README.md"),
        )
    raise ResultsError(
        f"{what}: other pushes kept landing first ({PUSH_ATTEMPTS} attempts); nothing was pushed"
    )


class _StaleParent(Exception):
    """The branch moved between reading its head and committing."""


def pull_results(
    repo_id: str,
    revision: str | None = None,
    *,
    token: str | None = None,
    output_dir: str | Path | None = None,
    cache_dir: str | Path | None = None,
) -> list[Path]:
    """Materialize every run of a results repo as a local run directory, pinned by commit.

    The revision is resolved to a commit sha, that snapshot's ``runs/*/`` files are downloaded,
    and each run becomes ``<output_dir>/<run_id>/`` holding ``run.json`` and
    ``episodes.jsonl``: readable by ``taskhub.read_run``. Pulling the same commit again reuses
    what is there, offline included.

    Args:
        repo_id: ``org/name`` of the results dataset repo.
        revision: Branch, tag or commit (the default branch when None).
        token: Hub token for private repos (huggingface_hub's own ``HF_TOKEN`` otherwise).
        output_dir: Where the run directories go; by default
            ``$HF_HOME/taskhub/results/<org>--<name>/<sha>/``.
        cache_dir: huggingface_hub cache folder (its default otherwise).

    Returns:
        The run directories, sorted by run id.

    Raises:
        ResultsError: The repo or revision does not exist, or a run does not validate.
    """
    from huggingface_hub import HfApi, constants, snapshot_download

    check_repo_id(repo_id, ResultsError)
    what = f"results pull of {repo_id}" + (f"@{revision}" if revision else "")
    try:
        with hub_errors(what, ResultsError):
            if revision is not None and re.fullmatch(r"[0-9a-f]{40}", revision):
                sha = revision
            else:
                sha = str(HfApi(token=token).dataset_info(repo_id, revision=revision).sha)
            with quiet_downloads():
                snapshot = snapshot_download(
                    repo_id,
                    repo_type="dataset",
                    revision=sha,
                    token=token,
                    cache_dir=str(cache_dir) if cache_dir is not None else None,
                    allow_patterns=["runs/*/run.json", "runs/*/episodes.parquet"],
                )
            folder = Path(snapshot)
    except TasksetNotFound as exc:
        raise ResultsError(str(exc)) from None
    base = (
        Path(output_dir)
        if output_dir is not None
        else Path(constants.HF_HOME) / "taskhub" / "results" / repo_id.replace("/", "--") / sha
    )
    out = []
    for run_json in sorted((folder / "runs").glob(f"*/{MANIFEST}")):
        run_id = run_json.parent.name
        target = base / run_id
        out.append(target)
        if (target / MANIFEST).is_file() and (target / EPISODES).is_file():
            continue
        parquet = run_json.parent / "episodes.parquet"
        staging = target.with_name(f".{run_id}.tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        try:
            manifest = RunManifest.model_validate_json(run_json.read_bytes())
            # written as read, a row group at a time
            write_results(staging / EPISODES, _parquet_records(parquet))
        except (ValidationError, ValueError) as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ResultsError(
                f"{repo_id}@{sha[:12]} runs/{run_id}: not a valid run: {exc}"
            ) from None
        write_manifest(staging, manifest)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return out


def _parquet_records(path: Path) -> Iterator[EpisodeRecord]:
    """The records of a pushed run's ``episodes.parquet`` (none when it is missing)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        return
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["record"]):
        for text in batch.column(0).to_pylist():
            yield EpisodeRecord.model_validate_json(text)
