"""Batch validation: many submissions side by side, each in its own process under a deadline.

Output folder layout (stable; the leaderboard reads it)::

    <output>/
      <name>.json      one ValidationReport per submission, written atomically when it ends
      summary.json     {"schema_version", "generated_at", "policy", "counts", "rows": [...]}
      summary.csv      the same rows, ranked (best first)
      logs/<name>.log  the worker's output, pip's included (its env server's under logs/<name>/)
      rfc008/<name>.json  with ``rfc008``: each report in RFC 008's own layout
      .pip-cache/      with ``isolated_venv``: the wheels shared by the submissions' installs

A report's file is named after its submission; a name that would take one of the batch's own
names (``summary``, ``logs``, ``rfc008``) gets a suffix, and two names that map to the same
file are refused. A submission whose ``<name>.json`` exists is not validated again, so a
stopped batch resumes where it stopped. Each worker validates a copy of its submission's
folder (or a fresh clone), never the folder itself. A worker that hangs past its deadline is
killed with its process group (its env server and pip die with it) and gets a report with
verdict ``error`` holding the checks it had finished, and saying what it was doing (cloning,
installing the requirements, validating); a worker that crashes gets one too. Nothing a
submission does can stop the batch. Ctrl-C or SIGTERM stops it: every worker and env server
is killed, finished reports are kept, and ``BatchInterrupted`` is raised.

Rows are ranked by how far validation got with the env (an episode was played, it only
started, or it did not start), then verdict (pass, warn, fail, unsupported, error), then
score (highest first; see ``taskhub.validators._policy``), then fewest failures, then name:
an env that never started or played never ranks above one that played.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from taskhub import (
    CheckResult,
    ConfigError,
    ErrorInfo,
    ValidationReport,
    __version__,
)

from ._config import ValidationConfig
from ._policy import (
    EXIT_CODES,
    VERDICT_RANK,
    Policy,
    blocked_by,
    load_policy,
    reached,
    score_of,
)
from ._rfc008 import rfc008_report
from ._sources import parse_git
from ._venv import DEFAULT_INSTALL_TIMEOUT_S

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
    "reached",
    "blocked",
)
#: Version of the summary.json layout (2: the score is 0-100 with blocked checks counted,
#: rows are ranked by ``reached`` first, and the ``reached`` and ``blocked`` columns exist).
SUMMARY_VERSION = 2
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
#: Names of the batch's own files and folders, which no report may take.
RESERVED_STEMS = frozenset({"summary", "logs", "rfc008"})
#: Longest report file name (without ``.json``).
MAX_STEM = 150
#: Rank of how far validation got, best first.
REACHED_RANK = {"played": 0, "started": 1, "none": 2}
#: What a worker was doing, by the word it writes in its phase file.
PHASES = {
    "clone": "cloning its repository",
    "copy": "copying its folder",
    "install": "installing its requirements (pip's output is in its log)",
    "validate": "validating",
}


class BatchInterrupted(Exception):  # noqa: N818 - a stop, not an error
    """Raised when a batch is stopped by a signal (Ctrl-C, SIGTERM) after it cleaned up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


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

    @property
    def file_stem(self) -> str:
        """The report's file name without ``.json``: the name, with unsafe characters as ``-``.

        A name that leaves nothing, or that would take one of the batch's own names
        (``RESERVED_STEMS``), gets a digest of the name as a suffix.
        """
        stem = _SAFE_NAME.sub("-", self.name).strip("-.")[:MAX_STEM].strip("-.")
        if not stem or stem.casefold() in RESERVED_STEMS:
            digest = hashlib.sha256(self.name.encode()).hexdigest()[:8]
            stem = f"{stem or 'submission'}-{digest}"
        return stem


def check_names(submissions: Iterable[Submission], where: str = "submissions") -> None:
    """Refuse two submissions whose reports would have the same file (case-insensitively).

    Raises:
        ConfigError: Two names map to one report file.
    """
    stems: dict[str, str] = {}
    for submission in submissions:
        key = submission.file_stem.casefold()
        if key in stems:
            raise ConfigError(
                f"{where}: submission {submission.name!r} would write the same report file "
                f"({submission.file_stem}.json) as {stems[key]!r}; names must be unique"
            )
        stems[key] = submission.name


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
    install_timeout_s: Annotated[float, Field(gt=0)] = DEFAULT_INSTALL_TIMEOUT_S
    """With ``isolated_venv``: time limit of one submission's install (within its deadline);
    a submission whose install runs out of it gets the static checks and a failed startup
    saying so."""
    pip_cache: Path | None = None
    """With ``isolated_venv``: pip's cache, shared by every submission's install
    (``<output>/.pip-cache`` when None)."""
    rfc008: bool = False
    """Also write each report in RFC 008's own layout, to ``<output>/rfc008/<name>.json``."""
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    """The validation run for each submission (its ``taskset`` is the default)."""
    ray: str | None = None
    """Validate on a Ray cluster at this address (``local``, ``auto``, ``HOST:PORT``): one Ray
    task per submission, on any node; the reports are still written here. None: subprocesses
    of this machine."""


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
        key = submission.file_stem.casefold()
        if key in stems:
            raise ConfigError(
                f"{path}:{number}: submission {submission.name!r} would write the same report "
                f"file ({submission.file_stem}.json) as {stems[key]!r}; names must be unique"
            )
        stems[key] = submission.name
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
    return {
        "passed": sum(c.status == "pass" for c in checks),
        "failed": sum(c.status == "fail" and c.severity == "fail" for c in checks),
        "warned": sum(c.status == "fail" and c.severity == "warn" for c in checks),
        "advisory": sum(c.status == "fail" and c.severity == "advisory" for c in checks),
        "skipped": sum(c.status == "skip" for c in checks),
        "errors": sum(c.status == "error" for c in checks),
        "blocked": sum(blocked_by(c) is not None for c in checks),
    }


def rank_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """Sort key of a summary row, best first: reached, verdict, score, failures, name."""
    return (
        REACHED_RANK[row["reached"]],
        VERDICT_RANK[row["verdict"]],
        -row["score"],
        row["failed"] + row["errors"],
        row["warned"],
        row["name"],
    )


def summary_rows(
    reports: list[tuple[str, ValidationReport]], policy: Policy | None = None
) -> list[dict[str, Any]]:
    """Rank reports best first: reached, then verdict, then score (see the module docstring).

    Args:
        reports: ``(report file name, report)`` pairs.
        policy: Policy whose weights give the score (the default policy when None).
    """
    policy = policy or load_policy()
    rows: list[dict[str, Any]] = []
    for file_name, report in reports:
        counts = _counts(report)
        rows.append(
            {
                "name": report.name,
                "verdict": report.verdict,
                "exit_code": report.exit_code,
                "score": score_of(report.checks, policy),
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
                "reached": reached(report),
            }
        )
    rows.sort(key=rank_key)
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


def target_kind(target: str) -> Literal["folder", "url", "git", "builtin"]:
    """What a submission's target is, as a report names it."""
    if parse_git(target) is not None:
        return "git"
    if re.match(r"^(https?|wss?)://", target):
        return "url"
    return "folder" if Path(target).is_dir() else "builtin"


def error_report(
    *,
    target: str,
    name: str,
    config: ValidationConfig,
    started_at: datetime,
    duration: float,
    error: ErrorInfo,
    checks: list[CheckResult] | None = None,
    kind: Literal["folder", "url", "git", "builtin"] | None = None,
) -> ValidationReport:
    """The report of a submission whose validation could not finish (verdict ``error``)."""
    policy = load_policy(config.policy)
    return ValidationReport(
        target=target,
        target_kind=kind or target_kind(target),
        name=name,
        policy={"name": policy.name, "version": policy.version},
        verdict="error",
        exit_code=EXIT_CODES["error"],
        checks=checks or [],
        started_at=started_at,
        duration_s=round(duration, 3),
        taskhub_version=__version__,
        model=config.model,
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
    """Kill what a worker launched (env servers, pip: each leads its own process group)."""
    with contextlib.suppress(OSError):
        for line in pids.read_text(encoding="utf-8").split():
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(line), signal.SIGKILL)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _kill_strays(folder: Path) -> None:
    """Kill every process still running in ``folder`` (with its process group).

    A worker killed while it starts a server can leave the server behind before it records
    its pid, or before the server has asked to die with its parent: every process a worker
    starts runs in the worker's folder, so the folder finds them all.
    """
    prefix = str(folder) + os.sep
    own = os.getpgrp()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cwd = os.readlink(f"/proc/{entry.name}/cwd")
                if not (cwd + os.sep).startswith(prefix):
                    continue
                pid = int(entry.name)
                group = os.getpgid(pid)
                if group == own:
                    os.kill(pid, signal.SIGKILL)
                else:
                    os.killpg(group, signal.SIGKILL)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    # A worker outlives a batch killed with SIGKILL unless the kernel ends it too. The signal
    # fires when the forking thread dies: workers are started from the event loop's thread.
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Batch:
    def __init__(
        self,
        submissions: list[Submission],
        config: BatchConfig,
        progress: Callable[[Submission, ValidationReport | None, str], None] | None,
    ):
        self.submissions = submissions
        self.config = config
        self.policy = load_policy(config.validation.policy)
        self.progress = progress
        self.output = config.output.resolve()  # workers run pip and servers elsewhere
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
        pids = self.work / f"{stem}.pids"
        phase = self.work / f"{stem}.phase"
        for path in (partial, pids, phase):
            path.unlink(missing_ok=True)
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
            "phase": str(phase),
            "log_dir": str(self.logs / stem),
            "isolated_venv": self.config.isolated_venv,
            "offline": self.config.offline,
            "install_timeout_s": min(self.config.install_timeout_s, deadline),
            "pip_cache": str((self.config.pip_cache or self.output / ".pip-cache").resolve()),
            "workdir": str(self.work / stem),
        }
        job_path = self.work / f"{stem}.job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        # no __pycache__ written by the env's server, in the copy or in a folder beside it
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
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
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
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
            doing = _phase(phase)
            error = ErrorInfo(
                type="DeadlineExceeded",
                boundary="batch",
                message=f"the submission was still {PHASES.get(doing, 'validating')} after "
                f"its {deadline:g}s deadline and was stopped; the checks it finished are kept"
                + (
                    ". Its install had a time limit of its own "
                    f"({self.config.install_timeout_s:g}s, --install-timeout)"
                    if doing == "install"
                    else ""
                ),
            )
        finally:
            if process.returncode is None:  # stopped: the worker first, or it reports the rest
                _kill_group(process)
            _kill_servers(pids)  # a killed or crashed worker may leave a server or pip behind
            _kill_strays(self.work / stem)
            self.processes.discard(process)
            self.pid_files.discard(pids)
        if error is not None:
            report = error_report(
                target=submission.target,
                name=submission.name,
                config=validation,
                started_at=started_at,
                duration=time.perf_counter() - started,
                error=error,
                checks=_partial_checks(partial),
            )
            write_report(report_path, report)
        for path in (partial, pids, phase, job_path):
            path.unlink(missing_ok=True)
        self.finished(submission, report_path)

    def finished(self, submission: Submission, report_path: Path) -> None:
        """After a submission's report is written: its RFC 008 copy, the log line, progress."""
        stem = submission.file_stem
        report_or_none = read_report(report_path)
        if report_or_none is not None and self.config.rfc008:
            folder = self.output / "rfc008"
            folder.mkdir(exist_ok=True)
            document = rfc008_report(report_or_none, self.policy)
            (folder / f"{stem}.json").write_text(json.dumps(document, indent=2) + "\n")
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

        run_one: Callable[[Submission], Awaitable[None]] = self.run_one
        stop_ray = False
        if self.config.ray is not None:
            from taskhub import connect_ray

            from ._ray import ray_task, run_one_on_ray

            stop_ray = connect_ray(self.config.ray)
            import ray

            remote = ray_task(ray)

            async def run_one(submission: Submission) -> None:
                await run_one_on_ray(self, submission, remote)

        async def worker() -> None:
            while not queue.empty():
                await run_one(queue.get_nowait())

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.config.workers, len(self.submissions))):
                    group.create_task(worker())
        finally:  # stopped (a signal, an error): kill what still runs, keep what finished
            for process in list(self.processes):
                _kill_group(process)
            for pids in list(self.pid_files):
                _kill_servers(pids)
            _kill_strays(self.work)
            self.write_summary()
            if stop_ray:
                import ray

                ray.shutdown()
        return self.rows()

    def rows(self) -> list[dict[str, Any]]:
        reports = []
        for submission in self.submissions:
            path = self.output / f"{submission.file_stem}.json"
            report = read_report(path)
            if report is not None:
                reports.append((path.name, report))
        return summary_rows(reports, self.policy)

    def write_summary(self) -> None:
        rows = self.rows()
        policy = self.config.validation.policy
        write_summary(self.output, rows, policy=policy, pending=len(self.submissions) - len(rows))


def _phase(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError:
        return "validate"


def _tail(path: Path, size: int = 1500) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-size:].decode("utf-8", "replace")


#: Signals that stop a batch (each worker and env server is killed first).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def validate_batch_async(
    submissions: list[Submission],
    config: BatchConfig,
    *,
    progress: Callable[[Submission, ValidationReport | None, str], None] | None = None,
) -> list[dict[str, Any]]:
    """Validate every submission (resuming: existing reports are kept) and write the summary.

    Ctrl-C (SIGINT) or SIGTERM stops the batch: every worker and env server is killed, the
    summary of the finished reports is written, and ``BatchInterrupted`` is raised (a run
    in another thread than the main one, where signals cannot be caught, is not stopped so).

    Args:
        submissions: What to validate (``read_submissions`` reads a file of them).
        config: Output folder, workers, deadlines, venv isolation, the validation itself.
        progress: Called after each submission with its report (None if it has none) and
            ``"validated"`` or ``"resumed"``.

    Returns:
        The summary rows, ranked best first.

    Raises:
        ConfigError: Bad policy, or two submissions would write the same report file.
        BatchInterrupted: A signal stopped the batch.
    """
    load_policy(config.validation.policy)  # fail on a bad policy before any work
    check_names(submissions)
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    caught: list[int] = []
    installed: list[signal.Signals] = []

    def stop(signum: int) -> None:
        if not caught and task is not None:
            caught.append(signum)
            task.cancel()

    for stop_signal in STOP_SIGNALS:
        try:
            loop.add_signal_handler(stop_signal, stop, int(stop_signal))
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # not the main thread: signals stay with whoever handles them
        installed.append(stop_signal)
    try:
        return await _Batch(submissions, config, progress).run()
    except asyncio.CancelledError:
        if caught:
            raise BatchInterrupted(caught[0]) from None
        raise
    finally:
        for stop_signal in installed:
            loop.remove_signal_handler(stop_signal)


def validate_batch(
    submissions: list[Submission], config: BatchConfig, **kwargs: Any
) -> list[dict[str, Any]]:
    """Run ``validate_batch_async`` to completion."""
    return asyncio.run(validate_batch_async(submissions, config, **kwargs))
