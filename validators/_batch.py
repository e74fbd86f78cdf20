"""Batch validation: many submissions side by side, each in its own process under a deadline.

Output folder layout (stable; the leaderboard reads it)::

    <output>/
      <name>.json      one ValidationReport per submission, written atomically when it ends
      summary.json     {"schema_version", "generated_at", "policy", "counts", "rows": [...]}
      summary.csv      the same rows, ranked (best first)
      logs/<name>.log  the worker's output (and its env server's, under logs/<name>/)

A submission whose ``<name>.json`` exists is not validated again, so a stopped batch resumes
where it stopped. A worker that hangs past its deadline is killed with its process group (its
env server dies with it) and gets a report with verdict ``error`` holding the checks it had
finished; a worker that crashes gets one too. Nothing a submission does can stop the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from taskhub import (
    CheckResult,
    ConfigError,
    ErrorInfo,
    ValidationReport,
    __version__,
)

from ._config import ValidationConfig
from ._policy import EXIT_CODES, VERDICT_RANK, load_policy
from ._sources import parse_git

logger = logging.getLogger(__name__)

_MODEL_CONFIG = ConfigDict(extra="forbid", use_attribute_docstrings=True)
#: Columns of summary.csv (and keys of each summary.json row), in order.
SUMMARY_FIELDS = (
    "rank",
    "name",
    "verdict",
    "exit_code",
    "score",
    "passed",
    "failed",
    "warned",
    "advisory",
    "skipped",
    "errors",
    "failed_checks",
    "target",
    "target_kind",
    "duration_s",
    "report",
    "source_digest",
    "error",
)
#: Version of the summary.json layout.
SUMMARY_VERSION = 1
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
#: File stems of the batch's own files in its output folder.
_RESERVED_STEMS = frozenset({"summary"})


class Submission(BaseModel):
    """One line of a submissions file."""

    model_config = _MODEL_CONFIG

    name: Annotated[str, Field(min_length=1, max_length=200)]
    """Name of the submission: its report is ``<name>.json`` (unsafe characters become ``-``)."""
    target: str
    """Env folder, URL of a running server, built-in env, or ``git+URL@commit``."""
    taskset: str | None = None
    """Taskset for this submission (the batch's when None)."""
    deadline_s: Annotated[float, Field(gt=0)] | None = None
    """Deadline of this submission (the batch's when None)."""

    @field_validator("name")
    @classmethod
    def _usable_name(cls, value: str) -> str:
        stem = _SAFE_NAME.sub("-", value).strip("-.")
        if not stem:
            raise ValueError(
                f"submission name {value!r} has no letter or digit: it cannot name a report file"
            )
        if stem in _RESERVED_STEMS:
            raise ValueError(
                f"submission name {value!r} would overwrite the batch's own {stem}.json: rename it"
            )
        return value

    @property
    def file_stem(self) -> str:
        """The report's file name without ``.json``."""
        return _SAFE_NAME.sub("-", self.name).strip("-.")


class BatchConfig(BaseModel):
    """How to run a batch."""

    model_config = _MODEL_CONFIG

    output: Path
    """Folder of the reports and summary."""
    workers: Annotated[int, Field(ge=1, le=64)] = 2
    """Submissions validated at once (each in its own process)."""
    deadline_s: Annotated[float, Field(gt=0)] = 900.0
    """Deadline of one submission (clone, venv, launch and every check); then it is killed."""
    budget_s: Annotated[float, Field(gt=0)] | None = None
    """Time budget of the whole batch: no submission starts after it and running ones are
    stopped at it. None: no budget."""
    isolated_venv: bool = False
    """Install each submission's declared requirements in its own virtual environment."""
    offline: bool = False
    """With ``isolated_venv``: install from local paths only (pip --no-index)."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """The validation run for each submission (its ``taskset`` is the default)."""


def _row_target(row: dict[str, Any], base: Path) -> str:
    for key in ("target", "url", "folder", "path", "git"):
        value = str(row.get(key) or "").strip()
        if not value:
            continue
        if key == "git" or parse_git(value) is not None:
            revision = str(row.get("commit") or row.get("revision") or row.get("ref") or "")
            subdirectory = str(row.get("subdirectory") or row.get("subdir") or "")
            text = value if value.startswith("git+") else f"git+{value}"
            git = parse_git(text)
            if revision and git is not None and git.revision is None:
                text += f"@{revision}"
            if subdirectory and "#subdirectory=" not in text:
                text += f"#subdirectory={subdirectory}"
            return text
        if re.match(r"^(https?|wss?)://", value):
            return value
        return _local_or_name(str(Path(value).expanduser()), base)
    raise ValueError("needs one of target, folder, path, url or git")


def _local_or_name(value: str, base: Path) -> str:
    """A path relative to the submissions file when it exists there, else ``value`` as is."""
    candidate = base / value
    if not Path(value).is_absolute() and candidate.exists():
        return str(candidate.resolve())
    return value


def read_submissions(path: Path | str) -> list[Submission]:
    """Read a submissions file: JSON lines or CSV, one submission per row.

    Each row has a ``name`` and one of ``target``, ``folder`` (or ``path``), ``url``, or
    ``git`` (with ``commit`` and optionally ``subdirectory``); optionally a ``taskset`` and
    a ``deadline_s``.
    Relative folders and tasksets are read from the file's directory.

    Raises:
        ConfigError: The file cannot be read, a row is invalid, or two names collide.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read submissions file {path}: {exc}") from None
    rows: list[tuple[int, dict[str, Any]]] = []
    if path.suffix == ".csv":
        rows = [(i + 2, dict(r)) for i, r in enumerate(csv.DictReader(text.splitlines()))]
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                raise ConfigError(f"{path}:{number}: not JSON: {exc}") from None
            if not isinstance(value, dict):
                raise ConfigError(f"{path}:{number}: expected an object, got {value!r:.80}")
            rows.append((number, value))
    submissions: list[Submission] = []
    stems: dict[str, str] = {}
    for number, row in rows:
        try:
            submission = Submission(
                name=str(row.get("name") or "").strip(),
                target=_row_target(row, path.parent),
                taskset=_local_or_name(str(row["taskset"]), path.parent)
                if row.get("taskset")
                else None,
                deadline_s=float(row["deadline_s"]) if row.get("deadline_s") else None,
            )
        except (ValueError, ValidationError) as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from None
        if submission.file_stem in stems:
            raise ConfigError(
                f"{path}:{number}: submission {submission.name!r} has the same report file as "
                f"{stems[submission.file_stem]!r}; names must be unique"
            )
        stems[submission.file_stem] = submission.name
        submissions.append(submission)
    if not submissions:
        raise ConfigError(f"{path} lists no submissions")
    return submissions


def read_report(path: Path) -> ValidationReport | None:
    """The report at ``path``, or None when missing or unreadable (it will be redone)."""
    try:
        return ValidationReport.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_report(path: Path, report: ValidationReport) -> None:
    """Write a report atomically (a partial file is never left under the final name)."""
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _counts(report: ValidationReport) -> dict[str, int]:
    checks = report.checks
    failed = [c for c in checks if c.status in ("fail", "error")]
    return {
        "passed": sum(c.status == "pass" for c in checks),
        "failed": sum(c.status == "fail" and c.severity == "fail" for c in checks),
        "warned": sum(c.status == "fail" and c.severity == "warn" for c in checks),
        "advisory": sum(c.status == "fail" and c.severity == "advisory" for c in checks),
        "skipped": sum(c.status == "skip" for c in checks),
        "errors": sum(c.status == "error" for c in checks),
        "_ran": sum(c.status != "skip" for c in checks),
        "_failed_ids": len(failed),
    }


def summary_rows(reports: list[tuple[str, ValidationReport]]) -> list[dict[str, Any]]:
    """Rank reports best first: by verdict, then fewest failures, then most passes, then name.

    Args:
        reports: ``(report file name, report)`` pairs.
    """
    rows: list[dict[str, Any]] = []
    for file_name, report in reports:
        counts = _counts(report)
        ran = counts.pop("_ran")
        counts.pop("_failed_ids")
        rows.append(
            {
                "name": report.name,
                "verdict": report.verdict,
                "exit_code": report.exit_code,
                "score": round(counts["passed"] / ran, 4) if ran else 0.0,
                **counts,
                "failed_checks": [c.id for c in report.checks if c.status in ("fail", "error")],
                "target": report.target,
                "target_kind": report.target_kind,
                "duration_s": report.duration_s,
                "report": file_name,
                "source_digest": report.source_digest,
                "error": f"{report.error.type}: {report.error.message}"[:300]
                if report.error
                else None,
            }
        )
    rows.sort(
        key=lambda r: (
            VERDICT_RANK[r["verdict"]],
            r["failed"] + r["errors"],
            r["warned"],
            -r["passed"],
            r["name"],
        )
    )
    return [{"rank": i + 1, **r} for i, r in enumerate(rows)]


def write_summary(output: Path, rows: list[dict[str, Any]], *, policy: str, pending: int) -> None:
    """Write ``summary.json`` and ``summary.csv`` (ranked rows) into ``output``."""
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICT_RANK}
    document = {
        "schema_version": SUMMARY_VERSION,
        "generated_at": datetime.now(UTC).isoformat(),
        "taskhub_version": __version__,
        "policy": policy,
        "submissions": len(rows) + pending,
        "validated": len(rows),
        "pending": pending,
        "counts": counts,
        "rows": [{k: r[k] for k in SUMMARY_FIELDS} for r in rows],
    }
    tmp = output / "summary.json.tmp"
    tmp.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, output / "summary.json")
    tmp = output / "summary.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "failed_checks": ";".join(row["failed_checks"])})
    os.replace(tmp, output / "summary.csv")


def _error_report(
    submission: Submission,
    config: BatchConfig,
    started_at: datetime,
    duration: float,
    error: ErrorInfo,
    checks: list[CheckResult],
) -> ValidationReport:
    policy = load_policy(config.validation.policy)
    return ValidationReport(
        target=submission.target,
        target_kind="git"
        if parse_git(submission.target)
        else ("url" if re.match(r"^(https?|wss?)://", submission.target) else "folder"),
        name=submission.name,
        policy={"name": policy.name, "version": policy.version},
        verdict="error",
        exit_code=EXIT_CODES["error"],
        checks=checks,
        started_at=started_at,
        duration_s=round(duration, 3),
        taskhub_version=__version__,
        model=config.validation.model,
        error=error,
    )


def _partial_checks(path: Path) -> list[CheckResult]:
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                out.append(CheckResult.model_validate_json(line))
    return out


def _kill_servers(pids: Path) -> None:
    """Kill the env servers a worker launched (each leads its own process group)."""
    with contextlib.suppress(OSError):
        for line in pids.read_text(encoding="utf-8").split():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(line), signal.SIGKILL)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


class _Batch:
    def __init__(
        self,
        submissions: list[Submission],
        config: BatchConfig,
        progress: Callable[[Submission, ValidationReport | None, str], None] | None,
    ):
        self.submissions = submissions
        self.config = config
        self.progress = progress
        self.output = config.output
        self.work = self.output / ".work"
        self.logs = self.output / "logs"
        self.started = time.monotonic()
        self.processes: set[asyncio.subprocess.Process] = set()
        self.pid_files: set[Path] = set()

    def remaining(self) -> float | None:
        if self.config.budget_s is None:
            return None
        return self.config.budget_s - (time.monotonic() - self.started)

    async def run_one(self, submission: Submission) -> None:
        report_path = self.output / f"{submission.file_stem}.json"
        if read_report(report_path) is not None:
            if self.progress:
                self.progress(submission, read_report(report_path), "resumed")
            return
        remaining = self.remaining()
        if remaining is not None and remaining <= 0:
            return  # left for a resumed run
        deadline = submission.deadline_s or self.config.deadline_s
        if remaining is not None:
            deadline = min(deadline, remaining)
        stem = submission.file_stem
        partial = self.work / f"{stem}.partial.jsonl"
        partial.unlink(missing_ok=True)
        pids = self.work / f"{stem}.pids"
        pids.unlink(missing_ok=True)
        validation = self.config.validation.model_copy(
            update={
                "name": submission.name,
                "taskset": submission.taskset or self.config.validation.taskset,
                "budget_s": min(self.config.validation.budget_s, deadline),
            }
        )
        job = {
            "target": submission.target,
            "config": validation.model_dump(mode="json"),
            "report": str(report_path),
            "partial": str(partial),
            "pids": str(pids),
            "log_dir": str(self.logs / stem),
            "isolated_venv": self.config.isolated_venv,
            "offline": self.config.offline,
            "workdir": str(self.work / stem),
        }
        job_path = self.work / f"{stem}.job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        env = dict(os.environ)
        if self.config.validation.api_key is not None:
            env["TASKHUB_VALIDATE_API_KEY"] = self.config.validation.api_key.get_secret_value()
        started_at, started = datetime.now(UTC), time.perf_counter()
        with (self.logs / f"{stem}.log").open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "taskhub.validators._worker",
                str(job_path),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=env,
            )
        self.processes.add(process)
        self.pid_files.add(pids)
        error: ErrorInfo | None = None
        try:
            async with asyncio.timeout(deadline):
                code = await process.wait()
            if code != 0 and read_report(report_path) is None:
                error = ErrorInfo(
                    type="WorkerCrashed",
                    boundary="batch",
                    code=str(code),
                    message=f"the validation worker exited with code {code}: "
                    + _tail(self.logs / f"{stem}.log"),
                )
        except TimeoutError:
            _kill_group(process)
            await process.wait()
            error = ErrorInfo(
                type="DeadlineExceeded",
                boundary="batch",
                message=f"the submission was still validating after its {deadline:g}s "
                "deadline and was stopped; the checks it finished are kept",
            )
        finally:
            self.processes.discard(process)
            self.pid_files.discard(pids)
        if error is not None:
            report = _error_report(
                submission,
                self.config,
                started_at,
                time.perf_counter() - started,
                error,
                _partial_checks(partial),
            )
            write_report(report_path, report)
            _kill_servers(pids)  # a killed or crashed worker may leave its server behind
        for path in (partial, pids, job_path):
            path.unlink(missing_ok=True)
        report_or_none = read_report(report_path)
        logger.info(
            "%s: %s", submission.name, report_or_none.verdict if report_or_none else "no report"
        )
        if self.progress:
            self.progress(submission, report_or_none, "validated")

    async def run(self) -> list[dict[str, Any]]:
        for folder in (self.output, self.work, self.logs):
            folder.mkdir(parents=True, exist_ok=True)
        queue: asyncio.Queue[Submission] = asyncio.Queue()
        for submission in self.submissions:
            queue.put_nowait(submission)

        async def worker() -> None:
            while not queue.empty():
                await self.run_one(queue.get_nowait())

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.config.workers, len(self.submissions))):
                    group.create_task(worker())
        finally:  # stopped (Ctrl-C, an error): kill what still runs, keep what finished
            for process in list(self.processes):
                _kill_group(process)
            for pids in list(self.pid_files):
                _kill_servers(pids)
            self.write_summary()
        return self.rows()

    def rows(self) -> list[dict[str, Any]]:
        reports = []
        for submission in self.submissions:
            path = self.output / f"{submission.file_stem}.json"
            report = read_report(path)
            if report is not None:
                reports.append((path.name, report))
        return summary_rows(reports)

    def write_summary(self) -> None:
        rows = self.rows()
        policy = self.config.validation.policy
        write_summary(self.output, rows, policy=policy, pending=len(self.submissions) - len(rows))


def _tail(path: Path, size: int = 1500) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-size:].decode("utf-8", "replace")


async def validate_batch_async(
    submissions: list[Submission],
    config: BatchConfig,
    *,
    progress: Callable[[Submission, ValidationReport | None, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Validate every submission (resuming: existing reports are kept) and write the summary.

    Args:
        submissions: What to validate (``read_submissions`` reads a file of them).
        config: Output folder, workers, deadlines, venv isolation, the validation itself.
        progress: Called after each submission with its report (None if it has none) and
            ``"validated"`` or ``"resumed"``.

    Returns:
        The summary rows, ranked best first.
    """
    load_policy(config.validation.policy)  # fail on a bad policy before any work
    return await _Batch(submissions, config, progress).run()


def validate_batch(
    submissions: list[Submission], config: BatchConfig, **kwargs: Any
) -> list[dict[str, Any]]:
    """Run ``validate_batch_async`` to completion."""
    return asyncio.run(validate_batch_async(submissions, config, **kwargs))
